"""Requests of the match-review actions (``jobs.actions.decisions``): decide a photo, decide its whole sighting,
undo a decision, bring in a photo to match.

Who acts is ``user``; the action still attributes the change to the signed-in person when one is known
(``jobs.actions.common.curator_name``), and refuses an empty name there.

A decision carries what the curator saw when deciding (the photo's decision version, its standing decision and
its individual): the action claims that state, so of two curators deciding one photo at once exactly one wins
and the other is told. The Match review tab builds these from the view on screen
(``jobs.actions.decisions.decision_request``), ``rosette decide`` from the state it reads
(``jobs.actions.decisions.decision_claim``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.requests import Request
from db.models import DecisionKind
from jobs.requests._values import as_id, optional_id, settle

DECISIONS = tuple(kind.value for kind in DecisionKind)  # the one vocabulary: db.models.DecisionKind


def _settle_seen(request: DecideRequest | DecideSightingRequest) -> None:
    settle(request, query_image_id=as_id(request.query_image_id, "photo"),
           candidate_image_id=optional_id(request.candidate_image_id, "candidate photo"),
           rank=optional_id(request.rank, "candidate's rank"),
           score=None if request.score is None else float(request.score),
           model_name=(request.model_name or "").strip() or None,
           seen_individual_id=optional_id(request.seen_individual_id, "individual seen"),
           seen_decision_id=optional_id(request.seen_decision_id, "decision seen"),
           seen_version=optional_id(request.seen_version, "photo's decision version"))


@dataclass(frozen=True)
class DecideRequest(Request):
    """One decision on one photo: ``same`` / ``not`` / ``unsure`` against a candidate photo, or ``new`` (a new
    individual for the photo, named ``new_name`` or numbered). ``rank`` and ``score`` are what the screen showed
    for the candidate; ``seen_*`` is the state the decision claims (``seen_version`` None: the version read just
    before recording)."""

    query_image_id: int
    decision: str
    user: str
    candidate_image_id: int | None = None
    rank: int | None = None
    score: float | None = None
    model_name: str | None = None
    new_name: str | None = None
    seen_individual_id: int | None = None
    seen_decision_id: int | None = None
    seen_version: int | None = None

    def __post_init__(self) -> None:
        if self.decision not in DECISIONS:
            raise ValueError(f"unknown decision {self.decision!r}")
        _settle_seen(self)
        settle(self, new_name=(self.new_name or "").strip() or None)


@dataclass(frozen=True)
class DecideSightingRequest(Request):
    """Bulk review: the shown photo is the candidate's individual ("same", with its rank and score), and so is
    every other photo of its sighting that is still undecided."""

    query_image_id: int
    candidate_image_id: int
    user: str
    rank: int | None = None
    score: float | None = None
    model_name: str | None = None
    seen_individual_id: int | None = None
    seen_decision_id: int | None = None
    seen_version: int | None = None

    def __post_init__(self) -> None:
        _settle_seen(self)


@dataclass(frozen=True)
class UndoDecisionRequest(Request):
    """Undo this curator's latest standing decision."""

    user: str


@dataclass(frozen=True)
class IngestQueryRequest(Request):
    """Import one photo to match (or find it when it is already in the catalogue)."""

    path: str
    user: str

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("Choose a photo to upload first.")


@dataclass(frozen=True)
class IndexBuildRequest(Request):
    """Build the on-disk IVF-PQ index of a species' gallery (``db.identify.vector_index``) for ``model`` (None: the
    species' active model); ``reason`` says why it was queued (match review past the threshold)."""

    species: int
    model: str | None = None
    user: str = "curator"
    reason: str | None = None

    def __post_init__(self) -> None:
        settle(self, species=as_id(self.species, "species"), model=(self.model or "").strip() or None,
               reason=(self.reason or "").strip() or None)
