"""Requests of the masking actions: mask photos in a batch (``rosette mask``, the Mask tab's "Mask all photos
without a mask", the ``mask`` job), keep the mask proposed for one photo (the Mask tab's Accept), and say which
side of the animal a photo shows.

A :class:`MaskDraft` is one photo being masked in the Mask tab: its prompts and the mask proposed for it, nothing
stored until the curator accepts it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.requests import Request
from jobs.requests._values import as_id, as_ids, settle

if TYPE_CHECKING:
    import numpy as np

NO_PHOTO = "Pick a photo first."


@dataclass(frozen=True)
class MaskPhotosRequest(Request):
    """Mask the catalogue's photos (``image_ids``: only those) with ``masker`` (None: SAM 2 when a checkpoint is
    configured, else GrabCut); ``only_missing``: leave the photos that have a mask alone."""

    masker: str | None = None
    only_missing: bool = True
    image_ids: tuple[int, ...] | None = None
    user: str = "curator"

    def __post_init__(self) -> None:
        settle(self, masker=self.masker or None,
               image_ids=None if self.image_ids is None else as_ids(self.image_ids, "photo"))


@dataclass
class MaskDraft:
    """One photo being masked: its prompts and the proposed (not yet stored) mask."""

    image_id: int | None = None
    points: list[tuple[float, float]] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)  # 1 animal, 0 background
    corners: list[tuple[float, float]] = field(default_factory=list)  # box corners clicked so far (0-2)
    box: tuple[float, float, float, float] | None = None
    mask: np.ndarray | None = field(default=None, repr=False)
    source: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    stored: bool = False  # the mask shown is the one already in the catalogue
    flank: str = "unknown"


@dataclass(frozen=True)
class AcceptMaskRequest:
    """Keep the mask proposed in ``draft`` for its photo (replacing any earlier one).

    Not a stored :class:`core.requests.Request`: the proposed mask is pixels held in the curator's session, and
    accepting it never runs as a job."""

    draft: MaskDraft
    user: str

    def __post_init__(self) -> None:
        if self.draft.image_id is None:
            raise ValueError(NO_PHOTO)
        if self.draft.mask is None or self.draft.stored:
            raise ValueError("There is no new mask to accept: click on the animal and press “Make mask” first.")


@dataclass(frozen=True)
class PhotoFlankRequest(Request):
    """Record which side of the animal the photo shows (left, right, front, other or unknown)."""

    image_id: int | None
    flank: str
    user: str

    def __post_init__(self) -> None:
        if self.image_id is None:
            raise ValueError(NO_PHOTO)
        settle(self, image_id=as_id(self.image_id, "photo"))
