"""The flank links the two-flank partial-identity density fit suggests, for a curator to confirm or reject (Match
review's links panel and ``rosette flank-links``; docs/density.md, "One-flank photos").

A suggestion is a pair the latest finished fit (a ``flank_density`` job) found probably one animal: "left-flank
identity L7 and right-flank identity R3: 0.82 probability the same animal (seen 400 m apart on nights 3 and 5)".
The model links flanks by where and when they were caught only, never by their coats, and the sentence says what
the probability rests on. A fit that did not converge suggests nothing.

Confirmed, the right-flank individual is merged into the left-flank one (the catalogue's merge, an undoable identity
event), so the next fit sees one animal with both flanks: a known link. Rejected, the pair is kept
(:class:`db.models.FlankLinkDecision`) and the next fit never links it. Pairs already answered, and pairs whose
individuals were merged, renamed or photographed on their other flank since the fit, are not suggested again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.catalogue import CatalogueError, ConflictError, NotFoundError
from db.field import flank_links as store
from db.field.individual_history import individual_history
from db.models import FlankLinkKind, Individual, Species
from db.session import Catalogue
from jobs.actions.common import attributed, curator_name
from jobs.requests.flank_links import (
    FlankLinkPicturesRequest,
    FlankLinkRequest,
    FlankLinkSuggestionsRequest,
    UndoFlankLinkRequest,
)

NO_FIT = "no two-flank fit yet: run it in the Population tab"
#: What every suggested probability rests on, said beside it so that it informs and does not push.
BASIS = ("The probability comes from the spatial model only (where and when each flank was photographed, and how "
         "far the animals range), not from the coat pattern: look at the two photos before answering.")


def _occasion_words(left: int, right: int, occasion_days: float | None) -> str:
    unit = "night" if occasion_days in (None, 1, 1.0) else "occasion"
    if left == right:
        return f"{unit} {left}"
    return f"{unit}s {left} and {right}"


def evidence_words(row: dict[str, Any], occasion_days: float | None = 1.0) -> str:
    """``seen 400 m apart on nights 3 and 5`` (the left identity's night first), ``seen at the same station on
    night 4``; empty when the row carries no evidence (a fit stored before it did)."""
    if row.get("distance_m") is None or row.get("left_occasion") is None:
        return ""
    when = _occasion_words(int(row["left_occasion"]), int(row["right_occasion"]), occasion_days)
    d = float(row["distance_m"])
    where = "at the same station" if d < 0.5 else f"{d:,.0f} m apart"
    return f"seen {where} on {when}"


@dataclass(frozen=True)
class LinkSuggestion:
    """One suggested pair as the fit saw it, with the evidence it rests on."""

    left: str
    right: str
    left_id: int
    right_id: int
    probability: float
    job_id: int
    evidence: str  # "seen 400 m apart on nights 3 and 5"

    @property
    def words(self) -> str:
        """The issue's sentence: who, how probable, and what it rests on."""
        tail = f" ({self.evidence})" if self.evidence else ""
        return (f"left-flank identity {self.left} and right-flank identity {self.right}: {self.probability:.2f} "
                f"probability the same animal{tail}")

    @property
    def key(self) -> str:
        """The pair as a choice's value: ``left|right``."""
        return f"{self.left}|{self.right}"

    def to_dict(self) -> dict[str, Any]:
        return {"left": self.left, "right": self.right, "left_id": self.left_id, "right_id": self.right_id,
                "probability": self.probability, "job_id": self.job_id, "evidence": self.evidence,
                "words": self.words}


@dataclass(frozen=True)
class Suggestions:
    """The suggestions of one fit, and what was left out of them."""

    job_id: int
    species: str | None
    suggestions: list[LinkSuggestion] = field(default_factory=list)
    answered: int = 0  # pairs a curator already answered
    changed: int = 0  # pairs whose individuals were merged, renamed or seen on their other flank since the fit

    @property
    def message(self) -> str:
        n = len(self.suggestions)
        head = (f"{n} flank link{'s' if n != 1 else ''} suggested by the two-flank fit (job #{self.job_id}"
                + (f", {self.species}" if self.species else "") + ")")
        left_out = []
        if self.answered:
            left_out.append(f"{self.answered} already answered")
        if self.changed:
            left_out.append(f"{self.changed} whose individuals changed since the fit")
        return head + (f"; left out: {', '.join(left_out)}" if left_out else "") + ". " + BASIS


@dataclass(frozen=True)
class LinkAnswered:
    """A curator's answer, recorded."""

    left: str
    right: str
    decision: str  # linked | rejected
    probability: float | None
    job_id: int | None
    merge_event_id: int | None

    @property
    def message(self) -> str:
        shown = "" if self.probability is None else f" (the fit gave {self.probability:.2f})"
        if self.decision == FlankLinkKind.linked.value:
            return (f"Linked: {self.right} was merged into {self.left}{shown}; the next two-flank fit treats them as "
                    "one animal (undo with the Catalogue tab's Undo or rosette flank-links undo).")
        return (f"Recorded: {self.left} and {self.right} are not the same animal{shown}; the next two-flank fit "
                "never links them.")


@dataclass(frozen=True)
class LinkUndone:
    left: str
    right: str
    decision: str

    @property
    def message(self) -> str:
        if self.decision == FlankLinkKind.linked.value:
            return f"Undone: {self.right} is its own individual again, apart from {self.left}."
        return f"Undone: the next two-flank fit may link {self.left} and {self.right} again."


def _fit(s: Session, species: str | None, job_id: int | None = None) -> store.FitRow:
    fit = store.fit_of_job(s, job_id) if job_id is not None else store.latest_fit(s, species=species)
    if fit is None:
        raise CatalogueError(NO_FIT + (f" for {species}" if species else ""))
    if fit.result.get("refused"):
        raise CatalogueError(f"the latest two-flank fit (job #{fit.job_id}) suggests no links: "
                             f"{fit.result.get('reason') or 'it was refused'}")
    return fit


def link_suggestions(cat: Catalogue, request: FlankLinkSuggestionsRequest) -> Suggestions:
    """The latest finished two-flank fit's unknown pairs at least ``floor`` probable, most probable first, minus the
    pairs already answered and those whose individuals no longer are as the fit saw them (merged, renamed, or now
    photographed on their other flank too). Refused in one sentence when there is no fit, or when it did not
    converge (its reason)."""
    with cat.unit_of_work() as s:
        fit = _fit(s, request.species)
        result = fit.result
        rows = [r for r in result.get("link_probabilities") or []
                if not r.get("known") and float(r["probability"]) >= request.floor]
        ids = {r.get("left_individual_id") for r in rows} | {r.get("right_individual_id") for r in rows}
        names = {r["left"] for r in rows} | {r["right"] for r in rows}
        now = store.individuals_now(s, ids=[i for i in ids if i is not None], names=names)
        by_name = {ind.name: ind for ind in now.values()}
        answered = {(a.left_id, a.right_id) for a in store.standing_answers(s)}
    catalogue = result.get("catalogue") or {}
    occasion_days = catalogue.get("occasion_days")
    out: list[LinkSuggestion] = []
    n_answered = n_changed = 0
    for r in sorted(rows, key=lambda r: (-float(r["probability"]), r["left"], r["right"])):
        left = now.get(r["left_individual_id"]) if r.get("left_individual_id") else by_name.get(r["left"])
        right = now.get(r["right_individual_id"]) if r.get("right_individual_id") else by_name.get(r["right"])
        if left is None or right is None:
            n_changed += 1
            continue
        if (left.id, right.id) in answered:
            n_answered += 1
            continue
        if (not left.active or not right.active or left.name != r["left"] or right.name != r["right"]
                or left.flanks != frozenset({"left"}) or right.flanks != frozenset({"right"})):
            n_changed += 1
            continue
        if len(out) < request.limit:
            out.append(LinkSuggestion(left=left.name, right=right.name, left_id=left.id, right_id=right.id,
                                      probability=float(r["probability"]), job_id=fit.job_id,
                                      evidence=evidence_words(r, occasion_days)))
    return Suggestions(job_id=fit.job_id, species=catalogue.get("species"), suggestions=out, answered=n_answered,
                       changed=n_changed)


def _individual(s: Session, name: str) -> Individual:
    ind = s.scalar(select(Individual).where(Individual.name == name))
    if ind is None:
        raise NotFoundError(f"there is no individual named {name!r}")
    return ind


def _check_pair(s: Session, left: Individual, right: Individual) -> None:
    """The pair is a left-flank and a right-flank identity as the fit reads them, both active, of one species."""
    now = store.individuals_now(s, ids=[left.id, right.id])
    for ind, side, other in ((left, "left", "right"), (right, "right", "left")):
        if not ind.active:
            raise CatalogueError(f"{ind.name} was merged into another individual since; that pair is no longer one "
                                 "to answer")
        if now[ind.id].flanks != frozenset({side}):
            shown = " and ".join(sorted(now[ind.id].flanks)) or "no"
            raise CatalogueError(f"{ind.name} is no {side}-flank identity (its photos show {shown} flank(s)); a "
                                 f"flank link joins an individual seen on its left flank only to one seen on its "
                                 "right only")
    if left.species_id != right.species_id:
        raise CatalogueError(f"{left.name} and {right.name} are of different species")


def _shown_probability(s: Session, request: FlankLinkRequest, left: Individual) -> tuple[float | None, int | None]:
    """The probability the fit gave the pair (the request's fit, else the latest of the pair's species)."""
    species = s.get(Species, left.species_id)
    fit = store.fit_of_job(s, request.job_id) if request.job_id is not None else \
        store.latest_fit(s, species=species.name if species else None)
    if fit is None:
        return None, None
    for r in fit.result.get("link_probabilities") or []:
        if r["left"] == request.left and r["right"] == request.right:
            return float(r["probability"]), fit.job_id
    return None, fit.job_id


def _answer(cat: Catalogue, request: FlankLinkRequest, decision: FlankLinkKind) -> LinkAnswered:
    user = curator_name(request.user)
    with attributed(user), cat.unit_of_work() as s:
        left, right = _individual(s, request.left), _individual(s, request.right)
        before = store.standing_answer(s, left.id, right.id)
        if before is not None:  # before the checks below: a second curator is told who answered, not "merged"
            raise store.conflict(s, before)
        _check_pair(s, left, right)
        probability, job_id = _shown_probability(s, request, left)
        answer = store.record_answer(s, left_id=left.id, right_id=right.id, decision=decision,
                                     probability=probability, job_id=job_id, user=user)
        s.commit()
    return LinkAnswered(left=request.left, right=request.right, decision=decision.value, probability=probability,
                        job_id=job_id, merge_event_id=answer.identity_event_id)


def confirm_link(cat: Catalogue, request: FlankLinkRequest) -> LinkAnswered:
    """The pair is one animal: merge the right-flank individual into the left-flank one (an undoable merge) and
    record the answer. A pair another curator answered is refused in one sentence (:class:`ConflictError`)."""
    return _answer(cat, request, FlankLinkKind.linked)


def reject_link(cat: Catalogue, request: FlankLinkRequest) -> LinkAnswered:
    """The pair is two animals: record it, so the next fit never links them."""
    return _answer(cat, request, FlankLinkKind.rejected)


def undo_link(cat: Catalogue, request: UndoFlankLinkRequest) -> LinkUndone:
    """Take back the standing answer to the pair (a confirmed link by undoing its merge)."""
    user = curator_name(request.user)
    with attributed(user), cat.unit_of_work() as s:
        left, right = _individual(s, request.left), _individual(s, request.right)
        answer = store.undo_answer(s, left.id, right.id, user=user)
        s.commit()
    return LinkUndone(left=request.left, right=request.right, decision=answer.decision.value)


def pair_pictures(cat: Catalogue, request: FlankLinkPicturesRequest) -> list[tuple[str, str]]:
    """The pair's two photos, left then right: the left individual's best left-flank photo and the right's best
    right-flank one (the individual page's choice: confirmed, masked, largest crop), as (path, caption)."""
    out = []
    with cat.unit_of_work() as s:
        for name, side in ((request.left, "left"), (request.right, "right")):
            history = individual_history(s, _individual(s, name).id)
            best = next((b for b in history.best_photos if b.flank == side), None)
            path = cat.blobs.existing(best.picture) if best is not None and best.picture else None
            if path:
                out.append((path, f"{name}: {side} flank · #{best.annotation_id}"))
    return out


__all__ = ["BASIS", "NO_FIT", "ConflictError", "LinkAnswered", "LinkSuggestion", "LinkUndone", "Suggestions",
           "confirm_link", "evidence_words", "link_suggestions", "pair_pictures", "reject_link", "undo_link"]
