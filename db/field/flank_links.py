"""The store's side of the flank links the two-flank partial-identity fit suggests (docs/density.md, "One-flank
photos"): the latest finished fit, the individuals a suggestion names as they are now, the curators' answers
(:class:`db.models.FlankLinkDecision`) and the rejected pairs the next fit must keep apart.

A confirmed pair is a merge (:func:`db.catalogue.merge_individuals`, one transaction with its answer), so the next
study sees one individual with both flanks, a known link. A rejected pair is only an answer row. One answer stands
per pair (a partial unique index): of two curators answering at once, one is recorded and the other told. A
confirmed answer whose merge was undone elsewhere (the Catalogue tab's Undo) stops standing with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from db.audit import record_action
from db.catalogue import ConflictError, NotFoundError, merge_individuals, undo_event
from db.models import (
    FlankLinkDecision,
    FlankLinkKind,
    Flank,
    IdentityEvent,
    Image,
    Individual,
    Job,
    JobStatus,
    utcnow,
)
from db.session import Catalogue

#: The job kind whose finished result is the partial-identity answer on the catalogue (jobs.kinds).
FIT_KIND = "flank_density"
#: How many of the newest finished fits are looked through for one of the species asked for.
FITS_LOOKED_AT = 50


@dataclass(frozen=True)
class FitRow:
    """A finished two-flank fit: its job and the answer it stored."""

    job_id: int
    finished_at: datetime | None
    result: dict


@dataclass(frozen=True)
class IndividualNow:
    """An individual as it is now: active or merged away, and the flanks its photos show."""

    id: int
    name: str
    active: bool
    species_id: int
    flanks: frozenset[str]


@dataclass(frozen=True)
class Answer:
    """A standing curator's answer to a pair."""

    id: int
    left_id: int
    right_id: int
    decision: FlankLinkKind
    probability: float | None
    job_id: int | None
    identity_event_id: int | None
    user: str
    created_at: datetime


def latest_fit(session: Session, *, species: str | None) -> FitRow | None:
    """The newest succeeded two-flank fit of ``species`` (any species when None)."""
    jobs = session.scalars(select(Job).where(Job.kind == FIT_KIND, Job.status == JobStatus.succeeded)
                           .order_by(Job.id.desc()).limit(FITS_LOOKED_AT))
    for job in jobs:
        result = job.result or {}
        if species is None or (result.get("catalogue") or {}).get("species") == species:
            return FitRow(job_id=job.id, finished_at=job.finished_at, result=result)
    return None


def fit_of_job(session: Session, job_id: int) -> FitRow:
    job = session.get(Job, job_id)
    if job is None or job.kind != FIT_KIND:
        raise NotFoundError(f"there is no two-flank fit #{job_id}")
    return FitRow(job_id=job.id, finished_at=job.finished_at, result=job.result or {})


def individuals_now(session: Session, *, ids: Iterable[int] = (),
                    names: Iterable[str] = ()) -> dict[int, IndividualNow]:
    """The individuals of ``ids`` and ``names`` as they are now, by id, with the left/right flanks of their photos."""
    wanted = set(ids)
    named = sorted(set(names))
    rows = list(session.scalars(select(Individual).where(Individual.id.in_(sorted(wanted))))) if wanted else []
    if named:
        rows += list(session.scalars(select(Individual).where(Individual.name.in_(named))))
    found = {i.id: i for i in rows}
    flanks: dict[int, set[str]] = {i: set() for i in found}
    if found:
        for ind, flank in session.execute(select(Image.individual_id, Image.flank).distinct()
                                          .where(Image.individual_id.in_(sorted(found)),
                                                 Image.flank.in_([Flank.left, Flank.right]))):
            flanks[ind].add(Flank(flank).value)
    return {i.id: IndividualNow(id=i.id, name=i.name, active=bool(i.active), species_id=i.species_id,
                                flanks=frozenset(flanks[i.id])) for i in found.values()}


def individual_ids(cat: Catalogue, names: Iterable[str]) -> dict[str, int]:
    """Individuals' ids by name (names are unique in a catalogue); a name no individual has is left out."""
    wanted = sorted(set(names))
    out: dict[str, int] = {}
    with cat.unit_of_work() as s:
        for lo in range(0, len(wanted), 500):
            out.update(dict(s.execute(select(Individual.name, Individual.id)
                                      .where(Individual.name.in_(wanted[lo:lo + 500]))).all()))
    return out


def _answer(row: FlankLinkDecision) -> Answer:
    return Answer(id=row.id, left_id=row.left_individual_id, right_id=row.right_individual_id,
                  decision=FlankLinkKind(row.decision), probability=row.probability, job_id=row.job_id,
                  identity_event_id=row.identity_event_id, user=row.user, created_at=row.created_at)


def _settle_undone_merges(session: Session, rows: Sequence[FlankLinkDecision], *,
                          mark: bool = True) -> list[FlankLinkDecision]:
    """Confirmed answers whose merge was undone elsewhere stop standing (with ``mark``, marked undone when it was:
    an answer to the pair may then be recorded again)."""
    standing = []
    events = {e.id: e for e in session.scalars(select(IdentityEvent).where(
        IdentityEvent.id.in_(sorted({r.identity_event_id for r in rows if r.identity_event_id}))))}
    for row in rows:
        ev = events.get(row.identity_event_id) if row.identity_event_id else None
        if row.decision == FlankLinkKind.linked and ev is not None and ev.undone_at is not None:
            if mark:
                row.undone_at = ev.undone_at
            continue
        standing.append(row)
    return standing


def standing_answers(session: Session) -> list[Answer]:
    """Every standing answer (a confirmed one whose merge was undone is not); only reads, so a viewer's list and a
    read-only catalogue can ask."""
    rows = list(session.scalars(select(FlankLinkDecision).where(FlankLinkDecision.undone_at.is_(None))
                                .order_by(FlankLinkDecision.id)))
    return [_answer(r) for r in _settle_undone_merges(session, rows, mark=False)]


def standing_answer(session: Session, left_id: int, right_id: int) -> Answer | None:
    rows = list(session.scalars(select(FlankLinkDecision).where(
        FlankLinkDecision.left_individual_id == left_id, FlankLinkDecision.right_individual_id == right_id,
        FlankLinkDecision.undone_at.is_(None))))
    standing = _settle_undone_merges(session, rows)
    session.flush()
    return _answer(standing[0]) if standing else None


def rejected_pairs(session: Session) -> list[tuple[str, str]]:
    """The standing rejected pairs as (left individual's name, right individual's name), as they are named now."""
    rows = session.execute(select(FlankLinkDecision.left_individual_id, FlankLinkDecision.right_individual_id)
                           .where(FlankLinkDecision.undone_at.is_(None),
                                  FlankLinkDecision.decision == FlankLinkKind.rejected)).all()
    if not rows:
        return []
    names = dict(session.execute(select(Individual.id, Individual.name).where(
        Individual.id.in_(sorted({i for pair in rows for i in pair})))).all())
    return sorted((names[a], names[b]) for a, b in rows)


def record_answer(session: Session, *, left_id: int, right_id: int, decision: FlankLinkKind,
                  probability: float | None, job_id: int | None, user: str) -> Answer:
    """Record an answer (merging the right individual into the left one when they are one animal); a pair already
    answered by someone else meanwhile is a :class:`ConflictError`, with nothing changed."""
    before = standing_answer(session, left_id, right_id)
    if before is not None:
        raise conflict(session, before)
    event_id = None
    if decision == FlankLinkKind.linked:
        event_id = merge_individuals(session, right_id, left_id, user=user).id
    row = FlankLinkDecision(left_individual_id=left_id, right_individual_id=right_id, decision=decision,
                            probability=probability, job_id=job_id, identity_event_id=event_id, user=user,
                            created_at=utcnow())
    session.add(row)
    try:
        session.flush()
    except IntegrityError:  # another curator's answer committed between the check and this one
        session.rollback()
        after = standing_answer(session, left_id, right_id)
        if after is None:
            raise
        raise conflict(session, after) from None
    return _answer(row)


def conflict(session: Session, answer: Answer) -> ConflictError:
    """The one sentence a curator reads when the pair was answered by someone already."""
    names = dict(session.execute(select(Individual.id, Individual.name).where(
        Individual.id.in_([answer.left_id, answer.right_id]))).all())
    said = "linked" if answer.decision == FlankLinkKind.linked else "rejected"
    return ConflictError(f"{answer.user} already {said} {names.get(answer.left_id)} and {names.get(answer.right_id)} "
                         f"(at {answer.created_at:%Y-%m-%d %H:%M}); undo that answer first to change it.")


def undo_answer(session: Session, left_id: int, right_id: int, *, user: str) -> Answer:
    """Take back the standing answer to a pair: a confirmed one by undoing its merge (refused, changing nothing,
    when later changes to the two individuals conflict), a rejected one by marking it undone. Of two curators
    undoing at once, one does and the other is told."""
    answer = standing_answer(session, left_id, right_id)
    if answer is None:
        raise NotFoundError("that pair has no standing answer to undo")
    claimed = session.execute(update(FlankLinkDecision).where(FlankLinkDecision.id == answer.id,
                                                              FlankLinkDecision.undone_at.is_(None))
                              .values(undone_at=utcnow())).rowcount
    if claimed != 1:
        raise ConflictError("that answer was just undone by someone else")
    # claimed by a plain UPDATE (so only one of two curators does it), which the ORM's audit does not see
    record_action(session, action="flank_link.undo", target=f"flank_link#{answer.id}",
                  details={"decision": answer.decision.value, "left_individual_id": left_id,
                           "right_individual_id": right_id})
    if answer.decision == FlankLinkKind.linked and answer.identity_event_id is not None:
        undo_event(session, answer.identity_event_id, user=user)
    return answer
