"""Match review: rank gallery candidates for a query photo, record the curator's
decision (applied to the catalogue as an identity event), undo it, and keep a
queue of unreviewed photos ordered by how confident their top match is.

Two curators deciding the same photo: each decision carries the query's
individual as the curator saw it (``seen_individual_id``); if the catalogue
changed since, the decision is refused with a message instead of silently
overwriting the other curator's call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import func, select, update

from core.identify.backbones import DEFAULT_BACKBONE
from core.identify.retrieval import build_index, prepare_cosine
from core.similarity import pairwise_scores
from db import catalogue as ops
from db.identify import vector_index
from db.catalogue import CatalogueError, ConflictError, check_date  # noqa: F401  (check_date: also read from here)
from db.embeddings import embed_images, gallery_image_ids, get_backbone
from db.models import DecisionKind, Image, MatchDecision, Model, utcnow
from db.identify.photos import image_rows
from db.session import Catalogue
from db.species import species_of_image
from db.identify.suggestions import QUEUE_ON_THE_FLY_LIMIT, queue_from_suggestions, suggestion_count
from db.identify.spots import load_pipeline, rerank_with_pipeline, with_decision_calibration
from db.identify.vector_index import (
    MAX_DELTA_FRACTION,
    GalleryIndex,
    exact_scores,
    index_for,
    index_threshold,
    streamed_topk,
)

DECISIONS = {d.value: d for d in DecisionKind}
_UNSET: Any = object()


@dataclass
class Candidate:
    rank: int
    image_id: int
    individual_id: int
    individual_name: str
    score: float
    flank: str
    sighting: str | None
    same_sighting: bool
    thumb_path: str | None
    blob_path: str
    # with a fused pipeline: the score is the fused probability; these say what it rests on
    global_score: float | None = None
    inliers: int | None = None
    spot_status: str | None = None  # core.identify.spots.verify.STATUS_WORDS key
    spot_probability: float | None = None  # the inlier count's calibrated probability
    in_photo_as: int | None = None  # the annotation of the query's own photo already identified as this individual


@dataclass
class MatchResult:
    query_image_id: int
    query_individual_id: int | None
    model_name: str
    model_provenance: str
    candidates: list[Candidate] = field(default_factory=list)
    pipeline: bool = False  # ranked by a fused pipeline (global shortlist + calibrated spot evidence)
    query_spot_note: str | None = None  # e.g. the query has no mask / no spot evidence
    # which index answered, e.g. "exact (FAISS flat, 1,234 photos)" or "IVF-PQ on disk (4 shards, ...)"
    index_used: str | None = None
    # jobs the caller should queue (the db layer cannot): e.g. building the gallery's on-disk index
    follow_up: list[dict[str, Any]] = field(default_factory=list)


def gallery_for(cat: Catalogue, *, species_id: int | None = None) -> list[int]:

    return gallery_image_ids(cat, species_id=species_id)


def passes_place_and_date(place: str | None, day: str | None, *, place_filter: str | None = None,
                          date_from: str | None = None, date_to: str | None = None) -> bool:
    """True when a photo's sighting place contains ``place_filter`` (case-insensitive) and its date
    (``YYYY-MM-DD...``) lies in [date_from, date_to]; a photo missing a filtered field does not pass."""
    if place_filter and (not place or place_filter.strip().lower() not in place.lower()):
        return False
    if date_from or date_to:
        if not day:
            return False
        d = day[:10]
        if (date_from and d < date_from) or (date_to and d > date_to):
            return False
    return True


def frame_siblings(cat: Catalogue, annotation_id: int) -> set[int]:
    """The other annotations of ``annotation_id``'s photo: animals seen beside it, never the same individual."""
    with cat.unit_of_work() as s:
        photo_id = s.scalar(select(Image.photo_id).where(Image.id == annotation_id))
        if photo_id is None:
            return set()
        return {int(i) for i in s.scalars(select(Image.id).where(Image.photo_id == photo_id,
                                                                  Image.id != annotation_id))}


def frame_individual_ids(cat: Catalogue, annotation_id: int) -> dict[int, int]:
    """Individual id -> the other annotation of ``annotation_id``'s photo identified as it: animals already named in
    the frame, none of which can be this one."""
    siblings = frame_siblings(cat, annotation_id)
    if not siblings:
        return {}
    with cat.unit_of_work() as s:
        rows = s.execute(select(Image.individual_id, Image.id).where(Image.id.in_(siblings),
                                                                     Image.individual_id.is_not(None))
                         .order_by(Image.id)).all()
    out: dict[int, int] = {}
    for ind, ann in rows:
        out.setdefault(int(ind), int(ann))
    return out


def rank_candidates(cat: Catalogue, query_image_id: int, *, model_name: str = DEFAULT_BACKBONE, k: int = 12,
                    flank_filter: str = "any", place: str | None = None, date_from: str | None = None,
                    date_to: str | None = None, per_individual: bool = True, progress=None) -> MatchResult:
    """Top-``k`` gallery candidates for a query photo, scored by ``model_name``.

    The gallery is every photo of the query's species assigned to an active individual, except the query and the
    other animals of the query's own photo (two animals in one frame are never the same individual); an individual
    already identified in that photo is flagged (``in_photo_as``) and ranked below the others.
    ``flank_filter``: ``any``, ``same`` (same flank as the query) or ``cross``.
    ``place`` / ``date_from`` / ``date_to`` keep gallery photos whose sighting place contains
    the text and whose date (sighting date, else EXIF time) lies in the range.
    With ``per_individual`` only each individual's best-scoring photo is listed.
    Past :func:`db.identify.vector_index.index_threshold` gallery photos the species' on-disk IVF-PQ index answers (or, until
    it is built, an exact search streamed in chunks): see :func:`_rank_large_gallery`. ``index_used`` names the index.
    """
    date_from = check_date(date_from, what="the 'from' date")
    date_to = check_date(date_to, what="the 'to' date")

    species_id = species_of_image(cat, query_image_id)
    whole = gallery_for(cat, species_id=species_id)
    same_photo = frame_siblings(cat, query_image_id)
    gallery = [i for i in whole if i != query_image_id and i not in same_photo]
    if len(gallery) >= index_threshold():  # past the threshold: never every embedding of the species at once
        return _rank_large_gallery(cat, query_image_id, whole, gallery, species_id=species_id, model_name=model_name,
                                   k=k, flank_filter=flank_filter, place=place, date_from=date_from,
                                   date_to=date_to, per_individual=per_individual)
    rows = image_rows(cat, gallery + [query_image_id])
    if query_image_id not in rows:
        raise CatalogueError(f"no image with id {query_image_id}")
    q = rows[query_image_id]
    q_flank = q[3].value if hasattr(q[3], "value") else str(q[3])
    if flank_filter in ("same", "cross") and q_flank in ("left", "right"):
        want = q_flank if flank_filter == "same" else ("right" if q_flank == "left" else "left")
        gallery = [i for i in gallery if (rows[i][3].value if hasattr(rows[i][3], "value") else rows[i][3]) == want]
    if place or date_from or date_to:
        gallery = [i for i in gallery if passes_place_and_date(rows[i][8], rows[i][9] or rows[i][10], place_filter=place,
                                                               date_from=date_from, date_to=date_to)]

    pipeline = load_pipeline(cat, model_name)
    if pipeline is not None:  # the curators' decisions replace the benchmark pairs once there are enough
        pipeline = with_decision_calibration(cat, pipeline, species_id=species_of_image(cat, query_image_id))
    backbone = get_backbone(cat, model_name)
    result = MatchResult(query_image_id=query_image_id, query_individual_id=q[1], model_name=model_name,
                         model_provenance=pipeline.provenance() if pipeline else provenance(backbone.config),
                         pipeline=pipeline is not None)
    if not gallery:
        return result
    emb = embed_images(cat, [query_image_id] + gallery, backbone=backbone, progress=progress)
    index = _gallery_index(backbone.config.name, tuple(gallery), emb[1:], metric=getattr(backbone, "metric", "cosine"))
    result.index_used = describe_search_index(index)
    # per individual, the best photo counts: fetch enough hits to fill k individuals in most cases
    depth = len(gallery) if not per_individual else min(len(gallery), max(k * 20, 200))
    scores, hits = index.search(emb[:1], depth)
    ranked = [(float(sc), int(j), None) for sc, j in zip(scores[0], hits[0]) if j >= 0]
    if pipeline is not None:

        ranked, result.query_spot_note = rerank_with_pipeline(cat, pipeline, query_image_id, gallery, ranked, rows)
    _fill_candidates(result, ranked, gallery, rows, q, k=k, per_individual=per_individual,
                     in_photo=frame_individual_ids(cat, query_image_id))
    return result


def _fill_candidates(result: MatchResult, ranked: list[tuple[float, int, Any]], gallery: list[int],
                     rows: dict[int, tuple], q: tuple, *, k: int, per_individual: bool,
                     in_photo: dict[int, int] | None = None) -> None:
    """The top ``k`` of ``ranked`` (score, position in ``gallery``, spot facts) as candidates (each individual's
    best photo only, with ``per_individual``); those of an individual already in the query's photo (``in_photo``:
    individual -> its annotation there) flagged and moved below the others, ranks renumbered."""
    in_photo = in_photo or {}
    seen: set[int] = set()
    for score, j, spot in ranked:
        r = rows[gallery[j]]
        if per_individual and r[1] in seen:
            continue
        seen.add(r[1])
        flank = r[3].value if hasattr(r[3], "value") else str(r[3])
        result.candidates.append(Candidate(
            rank=len(result.candidates) + 1, image_id=r[0], individual_id=r[1], individual_name=r[2],
            score=float(score), flank=flank, sighting=r[4],
            same_sighting=bool(q[7] is not None and r[7] == q[7]), thumb_path=r[5], blob_path=r[6],
            in_photo_as=in_photo.get(r[1]), **(spot or {})))
        if len(result.candidates) >= k:
            break
    result.candidates.sort(key=lambda c: c.in_photo_as is not None)  # stable: the others keep their order
    for n, c in enumerate(result.candidates, start=1):
        c.rank = n


def describe_search_index(index: Any) -> str:
    """Which in-memory index answered, e.g. ``exact (FAISS flat, 1,234 photos)``."""
    n = len(index)
    if index.kind == "flat":
        return f"exact (FAISS flat, {n:,} photos)"
    if index.kind == "hnsw":
        return f"HNSW in memory ({n:,} photos, efSearch {index.ef_search})"
    return f"IVF in memory ({n:,} photos, nlist {getattr(index.index, 'nlist', '?')}, nprobe {index.nprobe})"


#: Past the threshold, how deep the index is searched at most while filters (flank, place, date) reject hits.
MAX_FILTERED_DEPTH = 20_000


def _index_hits(cat: Catalogue, gi: GalleryIndex, query: np.ndarray, depth: int, *, exclude: int,
                backbone: Any) -> tuple[np.ndarray, np.ndarray]:
    """(photo ids, exact scores) of the on-disk index's ``depth`` best hits plus the photos added since its build,
    best first (ties by photo id); the photos that left the gallery and ``exclude`` (the query) are dropped."""
    extra = min(len(gi.removed), depth) + 1
    _, pos = gi.index.search_ids(prepare_cosine(query), depth + extra)
    pos = pos[0][pos[0] >= 0]
    ids = np.asarray(gi.ids[pos], dtype=np.int64)  # the memmapped id order: only these entries are read
    keep = ids != exclude
    if len(gi.removed):
        keep &= ~np.isin(ids, gi.removed)
    found = np.concatenate([ids[keep][:depth], gi.added[gi.added != exclude]]).astype(np.int64)
    scores = exact_scores(cat, query, found.tolist(), backbone=backbone)  # PQ scores are approximate: re-score
    order = np.lexsort((found, -scores))
    return found[order], scores[order]


def _rank_large_gallery(cat: Catalogue, query_image_id: int, whole: list[int], gallery: list[int], *,
                        species_id: int, model_name: str, k: int, flank_filter: str, place: str | None,
                        date_from: str | None, date_to: str | None, per_individual: bool) -> MatchResult:
    """:func:`rank_candidates` past the threshold: the query alone is embedded and looked up in the species'
    on-disk IVF-PQ index (:mod:`db.identify.vector_index`); rows and features are read for the hits only. Without a usable
    index the build job is asked for (``follow_up``) and the gallery is searched exactly, streamed in chunks."""
    q_rows = image_rows(cat, [query_image_id])
    if query_image_id not in q_rows:
        raise CatalogueError(f"no image with id {query_image_id}")
    q = q_rows[query_image_id]
    q_flank = q[3].value if hasattr(q[3], "value") else str(q[3])
    want_flank = None
    if flank_filter in ("same", "cross") and q_flank in ("left", "right"):
        want_flank = q_flank if flank_filter == "same" else ("right" if q_flank == "left" else "left")
    filtered = bool(want_flank or place or date_from or date_to)

    pipeline = load_pipeline(cat, model_name)
    if pipeline is not None:
        pipeline = with_decision_calibration(cat, pipeline, species_id=species_id)
    backbone = get_backbone(cat, model_name)
    result = MatchResult(query_image_id=query_image_id, query_individual_id=q[1], model_name=model_name,
                         model_provenance=pipeline.provenance() if pipeline else provenance(backbone.config),
                         pipeline=pipeline is not None)
    emb_q = embed_images(cat, [query_image_id], backbone=backbone)
    siblings = frame_siblings(cat, query_image_id)  # the index holds the whole gallery, the query's frame included
    gi = index_for(cat, species_id, backbone, gallery=whole)
    build = {"kind": "build_index", "params": {"species": int(species_id), "model": model_name,
                                               "reason": "match review past the vector-index threshold"}}
    want = k if not per_individual else max(k * 20, 200)
    depth = min(len(gallery), want * (20 if filtered else 1))

    def passes(r: tuple) -> bool:
        flank = r[3].value if hasattr(r[3], "value") else str(r[3])
        return ((want_flank is None or flank == want_flank)
                and (not (place or date_from or date_to)
                     or passes_place_and_date(r[8], r[9] or r[10], place_filter=place, date_from=date_from,
                                              date_to=date_to)))

    while True:
        if gi is not None:
            found, scores = _index_hits(cat, gi, emb_q, depth, exclude=query_image_id, backbone=backbone)
            result.index_used = gi.describe()
            if len(gi.added) + len(gi.removed) > 0.5 * MAX_DELTA_FRACTION * len(whole):
                result.follow_up = [build]  # rebuild before the index goes stale
        else:
            scores, pos = streamed_topk(cat, emb_q, gallery, backbone=backbone, k=depth)
            found = np.asarray(gallery, dtype=np.int64)[pos]
            streamed = f"exact (streamed in chunks of {vector_index.CHUNK_IDS:,} photos, {len(gallery):,} photos)"
            if vector_index.model_metric(backbone) == "cosine":
                result.index_used = f"{streamed}: no up-to-date IVF-PQ index for this gallery yet; its build is queued"
                result.follow_up = [build]
            else:
                result.index_used = f"{streamed}: the on-disk IVF-PQ index serves cosine models only"
        rows = image_rows(cat, found.tolist())
        kept = [(float(sc), int(i)) for sc, i in zip(scores, found)
                if int(i) in rows and int(i) not in siblings and passes(rows[int(i)])]
        if not filtered or len(kept) >= want or depth >= min(len(gallery), MAX_FILTERED_DEPTH) or gi is None:
            break
        depth = min(len(gallery), MAX_FILTERED_DEPTH, depth * 4)
    shortlist = [i for _, i in kept]
    ranked: list[tuple[float, int, Any]] = [(sc, j, None) for j, (sc, _) in enumerate(kept)]
    rows[query_image_id] = q
    if pipeline is not None and ranked:
        ranked, result.query_spot_note = rerank_with_pipeline(cat, pipeline, query_image_id, shortlist, ranked, rows)
    _fill_candidates(result, ranked, shortlist, rows, q, k=k, per_individual=per_individual,
                     in_photo=frame_individual_ids(cat, query_image_id))
    return result


_INDEX_CACHE: dict[tuple[str, str], Any] = {}


def _gallery_index(model_name: str, gallery: tuple[int, ...], emb: np.ndarray, *, metric: str) -> Any:
    """FAISS index over the gallery embeddings (exact for small galleries, approximate above
    ``core.identify.retrieval``'s measured threshold), reused while the gallery and model are unchanged."""
    import hashlib

    key = (model_name, hashlib.sha1(np.ascontiguousarray(emb).tobytes() + repr(gallery).encode()).hexdigest())
    index = _INDEX_CACHE.get(key)
    if index is None:
        _INDEX_CACHE.clear()  # one gallery at a time: galleries change with every decision
        index = _INDEX_CACHE[key] = build_index(emb, metric=metric)
    return index


def provenance(config: Any) -> str:
    """One line saying which model, weights and preprocessing produced a score."""
    d = config.to_dict() if hasattr(config, "to_dict") else dict(config)
    size = d.get("input_size")
    return (f"{d.get('name')} | weights: {d.get('weight_source')} | input {size} mean {d.get('mean')} std {d.get('std')}"
            f" | pooling {d.get('pooling')} | dim {d.get('embed_dim')} | config {config.fingerprint() if hasattr(config, 'fingerprint') else ''}")


def record_decision(cat: Catalogue, *, query_image_id: int, decision: str, user: str,
                    candidate_image_id: int | None = None, score: float | None = None, rank: int | None = None,
                    model_name: str | None = None, seen_individual_id: Any = _UNSET,
                    seen_decision_id: Any = _UNSET, seen_version: int | None = None,
                    new_name: str | None = None) -> MatchDecision:
    """Store a decision and apply it: ``same`` assigns the query to the candidate's individual,
    ``new`` creates an individual for the query, ``not`` / ``unsure`` only record.

    ``seen_individual_id`` / ``seen_decision_id``: the query's individual and its latest standing
    decision (None if none) as the curator saw them; if either changed since, another curator
    decided this photo meanwhile and the decision is refused with a ``ConflictError``.

    Race-free: the transaction starts with ``UPDATE images SET decision_version = v + 1 WHERE id = :q AND
    decision_version = v`` (v: ``seen_version``, what the curator saw; without one, the version read just
    before). SQLite takes the write lock at that statement and evaluates the WHERE on the latest committed
    row, so of two simultaneous decisions exactly one matches; the other changes nothing (no individual is
    created for it) and is told."""
    if decision not in DECISIONS:
        raise CatalogueError(f"unknown decision {decision!r}; expected one of {', '.join(DECISIONS)}")
    kind = DECISIONS[decision]
    if seen_version is None:
        seen_version = current_decision_version(cat, query_image_id)
    with cat.unit_of_work() as s:
        claimed = s.execute(update(Image).where(Image.id == query_image_id, Image.decision_version == seen_version)
                            .values(decision_version=Image.decision_version + 1)).rowcount
        if claimed != 1:
            s.rollback()
            ops.get_image(s, query_image_id)  # a clear "no image" error first
            last = s.scalar(select(MatchDecision).where(MatchDecision.query_image_id == query_image_id)
                            .order_by(MatchDecision.id.desc()).limit(1))
            who = f" by {last.user} at {last.created_at:%H:%M:%S}" if last else ""
            raise ConflictError(f"this photo was decided{who} after you opened it; reload to see the current state")
        query = ops.get_image(s, query_image_id)
        last = s.scalar(select(MatchDecision).where(MatchDecision.query_image_id == query_image_id,
                                                    MatchDecision.undone_at.is_(None))
                        .order_by(MatchDecision.id.desc()).limit(1))
        moved = seen_individual_id is not _UNSET and query.individual_id != seen_individual_id
        redecided = seen_decision_id is not _UNSET and (last.id if last else None) != seen_decision_id
        if moved or redecided:
            who = f" by {last.user} at {last.created_at:%H:%M:%S}" if last else ""
            raise ConflictError(f"this photo was decided{who} after you opened it; reload to see the current state")
        candidate_individual = None
        if candidate_image_id is not None:
            candidate_individual = ops.get_image(s, candidate_image_id).individual_id
        event = None
        if kind == DecisionKind.same:
            if candidate_individual is None:
                raise CatalogueError("'same individual' needs a candidate that belongs to an individual")
            if query.individual_id != candidate_individual:
                event = ops.assign_image(s, query_image_id, candidate_individual, user=user)
        elif kind == DecisionKind.new_individual:
            new = ops.create_individual(s, new_name or None, user=user,
                                        species_id=ops.get_image(s, query_image_id).species_id)
            event = ops.assign_image(s, query_image_id, new.id, user=user)
            candidate_individual = new.id
        model_id = s.scalar(select(Model.id).where(Model.name == model_name)) if model_name else None
        dec = MatchDecision(query_image_id=query_image_id, candidate_image_id=candidate_image_id,
                            candidate_individual_id=candidate_individual, decision=kind, score=score, rank=rank,
                            model_name=model_name, model_id=model_id, user=user, created_at=utcnow(),
                            identity_event_id=event.id if event else None)
        s.add(dec)
        s.commit()
        return dec


def standing_decision(cat: Catalogue, image_id: int) -> tuple[int, MatchDecision | None]:
    """(the photo's decision version, its standing decision or None), read in one transaction: what a
    decision made now "saw" (unknown photos raise)."""
    with cat.unit_of_work() as s:
        version = int(ops.image_field(s, image_id, Image.decision_version))
        last = s.scalar(select(MatchDecision).where(MatchDecision.query_image_id == image_id,
                                                    MatchDecision.undone_at.is_(None))
                        .order_by(MatchDecision.id.desc()).limit(1))
        if last is not None:
            s.expunge(last)
        return version, last


def current_decision_version(cat: Catalogue, image_id: int) -> int:
    """The photo's decision version (what a decision made now would claim)."""
    with cat.unit_of_work() as s:
        return int(ops.image_field(s, image_id, Image.decision_version))


def undo_decision(cat: Catalogue, decision_id: int | None = None, *, user: str) -> MatchDecision:
    """Undo a decision (default: the user's latest), reversing its catalogue change."""
    with cat.unit_of_work() as s:
        if decision_id is None:
            dec = s.scalar(select(MatchDecision).where(MatchDecision.user == user, MatchDecision.undone_at.is_(None))
                           .order_by(MatchDecision.id.desc()).limit(1))
            if dec is None:
                raise CatalogueError("nothing to undo")
        else:
            dec = s.get(MatchDecision, decision_id)
            if dec is None:
                raise CatalogueError(f"no decision {decision_id}")
            if dec.undone_at is not None:
                raise ConflictError(f"decision {decision_id} was already undone")
        if dec.identity_event_id is not None:  # undoing its change undoes the decision with it (db.catalogue)
            ops.undo_event(s, dec.identity_event_id, user=user)
        else:
            dec.undone_at = utcnow()
            s.execute(update(Image).where(Image.id == dec.query_image_id)
                      .values(decision_version=Image.decision_version + 1))
        s.commit()
        return dec


def decisions_for(cat: Catalogue, query_image_id: int) -> list[MatchDecision]:
    with cat.unit_of_work() as s:
        return list(s.scalars(select(MatchDecision).where(MatchDecision.query_image_id == query_image_id)
                              .order_by(MatchDecision.id)))


@dataclass
class QueueItem:
    image_id: int
    top_score: float
    top_individual: str | None
    assigned: bool


def review_queue(cat: Catalogue, *, model_name: str = DEFAULT_BACKBONE, limit: int = 200,
                 progress=None) -> list[QueueItem]:
    """Photos with no standing decision, most confident top match first (unassigned photos first).

    Up to :data:`db.identify.suggestions.QUEUE_ON_THE_FLY_LIMIT` photos every pending photo is ranked now; past it the queue
    reads the best matches stored by the species' index build (``rosette index build``), one indexed query."""
    with cat.unit_of_work() as s:
        n_photos = int(s.scalar(select(func.count()).select_from(Image)) or 0)
    if n_photos > QUEUE_ON_THE_FLY_LIMIT:
        stored = queue_from_suggestions(cat, model_name=model_name, limit=limit)
        if not stored and suggestion_count(cat, model_name=model_name) == 0:
            raise CatalogueError(f"the catalogue holds {n_photos:,} photos, too many to rank on the fly (over "
                                 f"{QUEUE_ON_THE_FLY_LIMIT:,}); build the species' vector index for {model_name} "
                                 "first (`rosette index build --species NAME`): it stores every photo's best match "
                                 "for this queue")
        return [QueueItem(it.image_id, it.top_score, it.top_individual, it.assigned) for it in stored]
    with cat.unit_of_work() as s:
        decided = set(s.scalars(select(MatchDecision.query_image_id).where(MatchDecision.undone_at.is_(None))))
        all_rows = s.execute(select(Image.id, Image.individual_id, Image.species_id).order_by(Image.id)).all()
    pending = [r[0] for r in all_rows if r[0] not in decided]
    if not pending:
        return []
    gallery = gallery_for(cat)
    if not gallery:
        return [QueueItem(i, 0.0, None, False) for i in pending[:limit]]
    backbone = get_backbone(cat, model_name)
    ids = sorted(set(pending) | set(gallery))
    emb = embed_images(cat, ids, backbone=backbone, progress=progress)
    pos = {i: n for n, i in enumerate(ids)}
    sim = pairwise_scores(emb[[pos[i] for i in pending]], emb[[pos[i] for i in gallery]],
                          metric=backbone.config.metric)
    gallery_arr = np.array(gallery)
    sim[np.array(pending)[:, None] == gallery_arr[None, :]] = -np.inf  # never match a photo to itself
    species = {r[0]: r[2] for r in all_rows}
    sp_pending = np.array([species[i] for i in pending])
    sp_gallery = np.array([species[i] for i in gallery])
    sim[sp_pending[:, None] != sp_gallery[None, :]] = -np.inf  # candidates come from the photo's own species
    best = sim.argmax(axis=1)
    rows = image_rows(cat, gallery)
    owner = dict((r[0], r[1]) for r in all_rows)
    items = [QueueItem(i, float(sim[n, best[n]]) if np.isfinite(sim[n, best[n]]) else 0.0,
                       rows[gallery[best[n]]][2] if np.isfinite(sim[n, best[n]]) else None, owner.get(i) is not None)
             for n, i in enumerate(pending)]
    items.sort(key=lambda it: (it.assigned, -it.top_score))
    return items[:limit]
