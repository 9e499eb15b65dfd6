"""Requests of the flank links the two-flank partial-identity fit suggests (Match review's links panel and
``rosette flank-links``): list the suggestions, answer one (the same animal, or not), take an answer back, and show
a pair's two photos. A pair is named by its two individuals' names, the left-flank one first, as the fit names them;
nothing chosen is refused here in the words the panel shows."""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.requests import Request
from jobs.requests._values import optional_id, settle
from jobs.requests.identities import whole_number

#: Pairs less probable than this are not suggested: a curator's time goes to the links the fit finds likely.
DEFAULT_FLOOR = 0.05
DEFAULT_LIMIT = 20
MAX_LIMIT = 500


def _name(value: object, side: str) -> str:
    if value is None or not str(value).strip():
        raise ValueError(f"Choose a suggested pair first (no {side}-flank individual given).")
    return str(value).strip()


def _pair(left: object, right: object) -> tuple[str, str]:
    a, b = _name(left, "left"), _name(right, "right")
    if a == b:
        raise ValueError(f"{a} is one individual; a flank link joins a left-flank individual to another, "
                         "right-flank one.")
    return a, b


@dataclass(frozen=True)
class FlankLinkSuggestionsRequest(Request):
    """The links the latest finished two-flank fit of ``species`` (None: of any species) suggests: pairs not known
    at the fit with a probability of at least ``floor``, at most ``limit`` of them, most probable first."""

    species: str | None = None
    floor: float = DEFAULT_FLOOR
    limit: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        if isinstance(self.floor, bool) or not isinstance(self.floor, (int, float)) or \
                not (math.isfinite(self.floor) and 0 <= self.floor < 1):
            raise ValueError(f"the least probability shown must be from 0 to under 1, got {self.floor!r}")
        limit = whole_number(self.limit, "number of suggestions")
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"the number of suggestions must be 1 to {MAX_LIMIT}, got {limit}")
        species = (self.species or "").strip() or None
        settle(self, species=species, floor=float(self.floor), limit=limit)


@dataclass(frozen=True)
class FlankLinkRequest(Request):
    """Answer the pair ``left`` (a left-flank individual) and ``right`` (a right-flank one): confirmed, they are
    merged into the left one; rejected, the next fit keeps them apart. ``job_id`` is the fit whose suggestion the
    curator saw (None: the latest of the pair's species); its probability is recorded with the answer."""

    left: str | None
    right: str | None
    user: str
    job_id: int | None = None

    def __post_init__(self) -> None:
        left, right = _pair(self.left, self.right)
        settle(self, left=left, right=right, job_id=optional_id(self.job_id, "fit (job)"))


@dataclass(frozen=True)
class UndoFlankLinkRequest(Request):
    """Take back the standing answer to ``left`` and ``right``: a confirmed link by undoing its merge, a rejected
    one by forgetting it (the next fit may link them again)."""

    left: str | None
    right: str | None
    user: str

    def __post_init__(self) -> None:
        left, right = _pair(self.left, self.right)
        settle(self, left=left, right=right)


@dataclass(frozen=True)
class FlankLinkPicturesRequest(Request):
    """The pair's two photos side by side: the left individual's best left-flank photo, the right's best right."""

    left: str | None
    right: str | None

    def __post_init__(self) -> None:
        left, right = _pair(self.left, self.right)
        settle(self, left=left, right=right)
