"""Match-review decisions, each one action over one request (``jobs.requests.match``): decide a photo, decide
its whole sighting, undo a decision, bring in a photo to match.

The Match review tab and ``rosette decide`` / ``rosette undo-decision`` call these same functions. A decision claims the state its curator saw (:class:`DecideRequest`'s ``seen_*``): a photo another
curator decided meanwhile is refused with a ``ConflictError`` rather than overwritten. The screen builds the
request from the view it shows (:func:`decision_request`), the command line from the state it reads
(:func:`decision_claim`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from db import catalogue as ops
from db.catalogue import CatalogueError
from db.io.ingest import ingest_uploads
from db.identify.matching import record_decision, undo_decision
from db.models import Image, Individual, MatchDecision, Sighting
from db.session import Catalogue
from jobs.actions.common import curator_name
from jobs.actions.match import DECISION_WORDS, MatchView, enum_value
from jobs.requests.match import DecideRequest, DecideSightingRequest, IngestQueryRequest, UndoDecisionRequest  # noqa: F401


@dataclass
class DecisionOutcome:
    decision_id: int
    message: str
    individual_id: int | None = None  # the candidate's individual (for ``new``: the new one), if any


@dataclass
class UndoOutcome:
    image_id: int  # the photo the undone decision was about
    decision_id: int
    message: str


@dataclass
class DecisionClaim:
    """What a decision made now "sees": the photo's decision version, individual and standing decision, read
    together (unknown photos raise)."""

    version: int
    individual_id: int | None
    decision_id: int | None = None  # the standing decision, if any
    decision: str | None = None
    user: str | None = None
    created_at: datetime | None = None


# --------------------------------------------------------------------------- building requests


@dataclass(frozen=True)
class ShownPair:
    """What the curator's page showed when a decision button was pressed: the photo to identify and the chosen
    card (its rank and its photo). The server keeps its own copy of the screen, and a late answer to an earlier
    event (a photo opened twice, a redraw) can overwrite that copy after the page was drawn; a decision therefore
    names what the page showed, and is refused when the server's view does not hold it."""

    query_image_id: int
    rank: int | None = None
    candidate_image_id: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> ShownPair | None:
        """``"query:rank:candidate"`` as the page writes it (rank and candidate empty with no card chosen); None
        when nothing was sent (an API client without a page)."""
        if not text or not str(text).strip():
            return None
        parts = (str(text).split(":") + ["", ""])[:3]
        try:
            query, rank, cand = (int(p) if p.strip() else None for p in parts)
        except ValueError:
            raise CatalogueError(f"The page sent an unreadable screen state ({text!r}); reload the page.") from None
        if query is None:
            return None
        return cls(query_image_id=query, rank=rank, candidate_image_id=cand)


def _shown_candidate(view: MatchView, decision: str, rank: int | None, shown: ShownPair | None):
    """The candidate a decision is about: the card the page showed chosen when it says so, else ``rank``."""
    if shown is not None and shown.query_image_id != view.query.image_id:
        raise CatalogueError(f"Nothing was recorded: the page showed animal #{shown.query_image_id} while the "
                             f"screen moved to animal #{view.query.image_id}. Look at the animal now shown and "
                             "decide again.")
    if decision == "new":
        return None
    if shown is None or shown.rank is None:
        return view.candidate(rank)
    cand = view.candidate(shown.rank)
    if cand is None or cand.rank != shown.rank or cand.image_id != shown.candidate_image_id:
        raise CatalogueError(f"Nothing was recorded: the candidates of animal #{view.query.image_id} changed as "
                             "you decided. Choose the candidate again and decide.")
    return cand


def decision_request(view: MatchView | None, decision: str, *, user: str, rank: int | None = None,
                     new_name: str | None = None, shown: ShownPair | None = None) -> DecideRequest:
    """The decision on the shown query against the candidate at ``rank`` (default: the top one), claiming the
    state the screen showed: its individual, its standing decision and its decision version. ``shown`` (what the
    page drew) overrides ``rank`` and must agree with ``view``."""
    user = curator_name(user)
    if view is None:
        raise CatalogueError("Open a photo to match first.")
    cand = _shown_candidate(view, decision, rank, shown)
    request = DecideRequest(query_image_id=view.query.image_id, decision=decision, user=user,
                            candidate_image_id=cand.image_id if cand else None, rank=cand.rank if cand else None,
                            score=cand.score if cand else None, model_name=view.model_name, new_name=new_name,
                            seen_individual_id=view.seen_individual_id, seen_decision_id=view.query.decided_id,
                            seen_version=view.query.decision_version)
    if decision != "new" and cand is None:
        raise CatalogueError("There is no candidate to compare with; choose 'new individual' or change the filter.")
    return request


def sighting_request(view: MatchView | None, *, user: str, rank: int | None = None,
                     shown: ShownPair | None = None) -> DecideSightingRequest:
    """Bulk review of the shown query's sighting as the candidate at ``rank`` (default: the top one); ``shown``
    as for :func:`decision_request`."""
    user = curator_name(user)
    if view is None:
        raise CatalogueError("Open a photo to match first.")
    cand = _shown_candidate(view, "sighting", rank, shown)
    if cand is None:
        raise CatalogueError("There is no candidate to compare with.")
    return DecideSightingRequest(query_image_id=view.query.image_id, candidate_image_id=cand.image_id, user=user,
                                 rank=cand.rank, score=cand.score, model_name=view.model_name,
                                 seen_individual_id=view.seen_individual_id, seen_decision_id=view.query.decided_id,
                                 seen_version=view.query.decision_version)


def decision_claim(cat: Catalogue, image_id: int) -> DecisionClaim:
    """The photo's decision state now (what ``rosette decide`` claims, as the screen claims what it showed)."""
    with cat.unit_of_work() as s:
        im = ops.get_image(s, int(image_id))
        last = s.scalar(select(MatchDecision).where(MatchDecision.query_image_id == im.id,
                                                    MatchDecision.undone_at.is_(None))
                        .order_by(MatchDecision.id.desc()).limit(1))
        claim = DecisionClaim(version=int(im.decision_version), individual_id=im.individual_id)
        if last is not None:
            claim.decision_id, claim.decision = last.id, enum_value(last.decision)
            claim.user, claim.created_at = last.user, last.created_at
        return claim


# --------------------------------------------------------------------------- actions


def _individual_name(cat: Catalogue, individual_id: int | None) -> str | None:
    if individual_id is None:
        return None
    with cat.unit_of_work() as s:
        return s.scalar(select(Individual.name).where(Individual.id == individual_id))


def decide(cat: Catalogue, request: DecideRequest) -> DecisionOutcome:
    """Record the decision and apply it: ``same`` assigns the photo to the candidate's individual, ``new`` starts
    a new individual for it, ``not`` / ``unsure`` only record. Refused (``ConflictError``) when the photo's state
    is no longer the one the request claims."""
    user = curator_name(request.user)
    dec = record_decision(cat, query_image_id=request.query_image_id, decision=request.decision, user=user,
                          candidate_image_id=request.candidate_image_id, score=request.score, rank=request.rank,
                          model_name=request.model_name, seen_individual_id=request.seen_individual_id,
                          seen_decision_id=request.seen_decision_id, seen_version=request.seen_version,
                          new_name=request.new_name)
    name = _individual_name(cat, dec.candidate_individual_id)
    photo = f"animal #{request.query_image_id}"  # an annotation: one animal of a photo, as the title names it
    shown = ", ".join(part for part in (f"candidate {request.rank}" if request.rank is not None else "",
                                        f"score {request.score:.3f}" if request.score is not None else "") if part)
    if request.decision == "same":
        text = f"Recorded: {photo} is {name}{f' ({shown})' if shown else ''}."
    elif request.decision == "new":
        text = f"Recorded: {photo} is a new individual, {name}."
    else:
        against = f" vs {name}{f' (candidate {request.rank})' if request.rank is not None else ''}" if name else ""
        text = f"Recorded: {photo}{against}: {DECISION_WORDS[request.decision]}."
    return DecisionOutcome(decision_id=dec.id, message=text, individual_id=dec.candidate_individual_id)


def decide_sighting(cat: Catalogue, request: DecideSightingRequest) -> DecisionOutcome:
    """Bulk review: the photo and every other photo of its sighting that is still undecided are the candidate's
    individual. The photo is decided as a plain "same" (with its score); each sibling gets a "same" decision of
    its own (no score: the model did not rank it), claimed like any decision, so a sibling another curator
    decided meanwhile is skipped and named, never overwritten. Undo takes them back one by one."""
    user = curator_name(request.user)
    with cat.unit_of_work() as s:
        sighting_id, sighting = s.execute(select(Image.sighting_id, Sighting.key)
                                          .outerjoin(Sighting, Image.sighting_id == Sighting.id)
                                          .where(Image.id == request.query_image_id)).first() or (None, None)
        if sighting_id is None:
            raise CatalogueError(f"Photo #{request.query_image_id} belongs to no sighting: decide it on its own.")
        standing = select(MatchDecision.query_image_id).where(MatchDecision.undone_at.is_(None))
        siblings = list(s.scalars(select(Image.id).where(
            Image.sighting_id == sighting_id, Image.id != request.query_image_id, Image.individual_id.is_(None),
            Image.id.not_in(standing)).order_by(Image.id)))
    first = decide(cat, DecideRequest(
        query_image_id=request.query_image_id, decision="same", user=user,
        candidate_image_id=request.candidate_image_id, rank=request.rank, score=request.score,
        model_name=request.model_name, seen_individual_id=request.seen_individual_id,
        seen_decision_id=request.seen_decision_id, seen_version=request.seen_version))
    done, skipped = [request.query_image_id], []
    for image_id in siblings:
        try:
            decide(cat, DecideRequest(query_image_id=image_id, decision="same", user=user,
                                      candidate_image_id=request.candidate_image_id, model_name=request.model_name,
                                      seen_individual_id=None, seen_decision_id=None))
            done.append(image_id)
        except CatalogueError as exc:  # ConflictError included: decided by someone else meanwhile
            skipped.append(f"#{image_id} ({exc})")
    name = _individual_name(cat, first.individual_id)
    score = f", score {request.score:.3f} for #{request.query_image_id}" if request.score is not None else ""
    text = (f"Recorded: the {len(done)} photo{'s' if len(done) != 1 else ''} of sighting {sighting} "
            f"({', '.join(f'#{i}' for i in done)}) are {name} (candidate {request.rank}{score}). "
            "Undo takes them back one at a time.")
    if skipped:
        text += f" Skipped: {'; '.join(skipped)}."
    return DecisionOutcome(decision_id=first.decision_id, message=text, individual_id=first.individual_id)


def undo_last_decision(cat: Catalogue, request: UndoDecisionRequest) -> UndoOutcome:
    """Undo this curator's latest standing decision, reversing what it changed in the catalogue."""
    dec = undo_decision(cat, user=curator_name(request.user))
    return UndoOutcome(image_id=dec.query_image_id, decision_id=dec.id,
                       message=(f"Undone: your '{DECISION_WORDS.get(enum_value(dec.decision), dec.decision)}' "
                                f"decision on photo #{dec.query_image_id}."))


def ingest_query(cat: Catalogue, request: IngestQueryRequest) -> tuple[int, str]:
    """Import one photo to match (or find it if already in the catalogue); returns (image id, message)."""
    report = ingest_uploads(cat, [request.path], user=curator_name(request.user))
    ids = report.image_ids
    if not ids:
        problems = "; ".join(f"{it.name}: {it.message}" for it in report.items if it.message) or "unknown reason"
        raise CatalogueError(f"The photo could not be imported ({problems}).")
    status = report.items[0].status if report.items else "imported"
    return ids[0], f"Photo #{ids[0]} {'imported' if status == 'imported' else status}."
