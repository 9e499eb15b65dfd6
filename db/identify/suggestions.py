"""Stored top matches: the review queue of a catalogue too large to rank on the fly.

Under :data:`QUEUE_ON_THE_FLY_LIMIT` photos, ``db.identify.matching.review_queue`` embeds and ranks every pending photo
when asked (what a small catalogue wants: always current). Past it, that would hold a pending x gallery score
matrix (10^12 cells at a million photos), so the queue is one SQL query over ``match_suggestions``: each photo's
best gallery match under a model, written in chunks by the job that builds the species' vector index
(``db.identify.vector_index``) or by :func:`store_suggestions`. The query needs no embedding at all; it reads the photos
with no standing decision, unassigned ones first, most confident first, and uses the ``(model_name, top_score, image_id)``
index to stop after ``limit`` rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import and_, delete, exists, func, insert, select

from db.models import Image, Individual, MatchDecision, MatchSuggestion, utcnow
from db.session import Catalogue

#: Past this many photos the review queue reads stored suggestions instead of ranking on the fly.
QUEUE_ON_THE_FLY_LIMIT = int(os.environ.get("ROSETTE_QUEUE_ON_THE_FLY_LIMIT", "50000"))
CHUNK_ROWS = 5000


@dataclass(frozen=True)
class Suggestion:
    """One photo's best gallery match under a model."""

    image_id: int
    top_image_id: int | None
    top_score: float


def store_suggestions(cat: Catalogue, *, model_name: str, suggestions: Iterable[Suggestion]) -> int:
    """Replace the stored suggestions of these photos under ``model_name``, in chunks; returns how many."""
    done = 0
    chunk: list[Suggestion] = []

    def flush() -> None:
        nonlocal done
        if not chunk:
            return
        ids = [sg.image_id for sg in chunk]
        with cat.engine.begin() as conn:
            conn.execute(delete(MatchSuggestion).where(MatchSuggestion.model_name == model_name,
                                                       MatchSuggestion.image_id.in_(ids)))
            conn.execute(insert(MatchSuggestion), [
                {"image_id": sg.image_id, "model_name": model_name, "top_image_id": sg.top_image_id,
                 "top_score": float(sg.top_score), "computed_at": utcnow()} for sg in chunk])
        done += len(chunk)
        chunk.clear()

    for sg in suggestions:
        chunk.append(sg)
        if len(chunk) >= CHUNK_ROWS:
            flush()
    flush()
    return done


@dataclass(frozen=True)
class StoredQueueItem:
    image_id: int
    top_score: float
    top_individual: str | None
    assigned: bool


def queue_from_suggestions(cat: Catalogue, *, model_name: str, limit: int = 200) -> list[StoredQueueItem]:
    """Photos with no standing decision and a stored suggestion under ``model_name``: unassigned first, then
    by descending top score; at most ``limit``. Two index-ordered scans (unassigned, then assigned), each
    stopping after ``limit`` rows."""
    standing = exists().where(and_(MatchDecision.query_image_id == Image.id, MatchDecision.undone_at.is_(None)))
    top_owner = Image.__table__.alias("top_image")
    out: list[StoredQueueItem] = []
    with cat.unit_of_work() as s:
        for assigned in (False, True):
            if len(out) >= limit:
                break
            # "+ 0" keeps the planner from driving the query from the individual_id index (every unassigned
            # photo, then a sort); the (model_name, top_score, image_id) index gives the order and the LIMIT stops it
            owner = Image.individual_id + 0
            owner_test = owner.is_not(None) if assigned else owner.is_(None)
            rows = s.execute(
                select(MatchSuggestion.image_id, MatchSuggestion.top_score, Individual.name)
                .join(Image, Image.id == MatchSuggestion.image_id)
                .outerjoin(top_owner, top_owner.c.id == MatchSuggestion.top_image_id)
                .outerjoin(Individual, Individual.id == top_owner.c.individual_id)
                .where(MatchSuggestion.model_name == model_name, owner_test, ~standing)
                .order_by(MatchSuggestion.top_score.desc(), MatchSuggestion.image_id.desc())
                .limit(limit - len(out))).all()
            out.extend(StoredQueueItem(int(r[0]), float(r[1]), r[2], assigned) for r in rows)
    return out


def suggestion_count(cat: Catalogue, *, model_name: str) -> int:
    with cat.unit_of_work() as s:
        return int(s.scalar(select(func.count()).select_from(MatchSuggestion)
                            .where(MatchSuggestion.model_name == model_name)) or 0)
