"""Requests of the catalogue's identity edits (rename, merge, split, move photos, undo), flanks and species.

Who acts is ``user``; the action still attributes the change to the signed-in person when one is known
(``jobs.actions.common.curator_name``). Nothing chosen (an individual id of None, no ticked photos) is let through
here and refused by the action in the words the Catalogue tab shows."""

from __future__ import annotations

from dataclasses import dataclass

from core.requests import Request
from jobs.requests._values import as_id, as_ids, optional_id, settle


@dataclass(frozen=True)
class RenameRequest(Request):
    """Give an individual a new name."""

    individual_id: int | None
    new_name: str
    user: str

    def __post_init__(self) -> None:
        settle(self, individual_id=optional_id(self.individual_id, "individual"), new_name=self.new_name or "")


@dataclass(frozen=True)
class MergeRequest(Request):
    """Move every photo of ``source_id`` into ``target_id`` and retire the source (undoable)."""

    source_id: int | None
    target_id: int | None
    user: str

    def __post_init__(self) -> None:
        settle(self, source_id=optional_id(self.source_id, "individual to merge"),
               target_id=optional_id(self.target_id, "individual to merge into"))


@dataclass(frozen=True)
class SplitRequest(Request):
    """Move photos out into a new individual (named ``new_name``, or a generated name when empty)."""

    image_ids: tuple[int, ...]
    user: str
    new_name: str | None = None

    def __post_init__(self) -> None:
        settle(self, image_ids=as_ids(self.image_ids, "photo"), new_name=(self.new_name or "").strip() or None)


@dataclass(frozen=True)
class MovePhotosRequest(Request):
    """Move photos to another individual, each an undoable change."""

    image_ids: tuple[int, ...]
    target_id: int | None
    user: str

    def __post_init__(self) -> None:
        settle(self, image_ids=as_ids(self.image_ids, "photo"), target_id=optional_id(self.target_id, "individual"))


@dataclass(frozen=True)
class SetFlanksRequest(Request):
    """Set the flank of every photo given to ``flank`` (left, right, front, other, unknown)."""

    image_ids: tuple[int, ...]
    flank: str | None
    user: str

    def __post_init__(self) -> None:
        settle(self, image_ids=as_ids(self.image_ids, "photo"))


@dataclass(frozen=True)
class AcceptFlankRequest(Request):
    """Take the suggested flank of a photo as its label."""

    image_id: int | None
    user: str

    def __post_init__(self) -> None:
        if self.image_id is None:
            raise ValueError("Open a photo first.")
        settle(self, image_id=as_id(self.image_id, "photo"))


@dataclass(frozen=True)
class UndoRequest(Request):
    """Undo an identity change.

    ``event_id``: exactly that change (``rosette undo EVENT``). Otherwise the newest change not undone yet; with
    ``seen_event_id`` (the change the curator saw as the newest) that one and no other: if a newer change came
    since, nothing is undone and the curator is shown it."""

    user: str
    seen_event_id: int | None = None
    event_id: int | None = None

    def __post_init__(self) -> None:
        if self.seen_event_id is not None and self.event_id is not None:
            raise ValueError("give the change to undo, or the one seen as the newest, not both")
        settle(self, seen_event_id=optional_id(self.seen_event_id, "change"),
               event_id=optional_id(self.event_id, "change"))


@dataclass(frozen=True)
class IndividualSpeciesRequest(Request):
    """Move an individual and its photos to a species (name, created when new, or number)."""

    individual_id: int | None
    species: str | None
    user: str

    def __post_init__(self) -> None:
        if self.individual_id is None:
            raise ValueError("Open an individual first.")
        settle(self, individual_id=as_id(self.individual_id, "individual"))


@dataclass(frozen=True)
class PhotoSpeciesRequest(Request):
    """Set the species of photos not assigned to an individual (an assigned photo follows its individual)."""

    image_ids: tuple[int, ...]
    species: str
    user: str

    def __post_init__(self) -> None:
        ids = as_ids(self.image_ids, "photo")
        if not ids:
            raise ValueError("choose the photos whose species to set")
        settle(self, image_ids=ids)


@dataclass(frozen=True)
class RenameSpeciesRequest(Request):
    """Rename a species (given by name or number): its scientific name (``new_name``; None keeps it) and/or its
    common name (``common_name``; None keeps it, an empty one clears it), in one undoable change."""

    species: str
    new_name: str | None
    user: str
    common_name: str | None = None

    def __post_init__(self) -> None:
        if self.new_name is None and self.common_name is None:
            raise ValueError("Give the species a new name or a common name.")


@dataclass(frozen=True)
class MergeSpeciesRequest(Request):
    """Move everything of species ``source`` into species ``target`` (names or numbers) and remove ``source``."""

    source: str | None
    target: str | None
    user: str

    def __post_init__(self) -> None:
        source, target = " ".join(str(self.source or "").split()), " ".join(str(self.target or "").split())
        if not source:
            raise ValueError("Choose the species to merge first.")
        if not target:
            raise ValueError("Choose the species to merge it into.")
        if source.casefold() == target.casefold():
            raise ValueError(f"Choose two different species (both are {source!r}).")
        settle(self, source=source, target=target)


@dataclass(frozen=True)
class SpeciesThresholdRequest(Request):
    """Below ``threshold`` (a calibrated probability, 0 to 1) match review suggests a new individual."""

    species: str
    threshold: float
    user: str

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float)) \
                or not 0.0 <= self.threshold <= 1.0:
            raise ValueError("the threshold must be a probability between 0 and 1")
        settle(self, threshold=float(self.threshold))
