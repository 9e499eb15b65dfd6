"""Calibrated confidence per model and species, from the curators' same / not-same decisions, topped up while
decisions are few with a benchmark's top-5 candidate pairs or, before any benchmark exists, the top-5 pairs of the
catalogue's own identified photos (what a curator sees in match review)."""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

import numpy as np
from sqlalchemy import select

from core.identify.calibration import (
    ENOUGH_DECISIONS,
    MIN_PLATT_OUTCOMES,
    Calibrator,
    discrimination,
    fit_match_calibrator,
    reliability,
)
from core.metrics import all_vs_all_valid
from core.similarity import pairwise_scores
from db.identify.compare import test_split_scores
from db.embeddings import embed_images, gallery_image_ids, get_backbone
from db.models import DEFAULT_SPECIES_ID, Benchmark, DecisionKind, Image, MatchDecision, Species
from db.session import Catalogue

DEFAULT_NEW_THRESHOLD = 0.5
_CACHE: dict[tuple, tuple[Calibrator | None, str | None]] = {}
#: per (data dir, model, species, benchmark): the latest calibration computed and what it rested on (decided pairs,
#: identified photos, pairs in all), which a review screen may reuse while a refit runs (``allow_stale``)
_LATEST: dict[tuple, tuple[int, int, int, tuple[Calibrator | None, str | None]]] = {}
_REFITTING: set[tuple] = set()
_REFIT_LOCK = threading.Lock()
#: a calibration on fewer pairs is always refitted at once; past it, reused until this share of its pairs changed
STALE_MIN_PAIRS = 1000
STALE_FRACTION = 0.01
TOP_K_PAIRS = 5  # pairs each identified photo adds to the catalogue's own outcomes
log = logging.getLogger("rosette.calibration")
#: the catalogue's own top-k pairs by what they are computed from (a few, oldest out first)
_PAIRS: dict[tuple, tuple[np.ndarray, ...]] = {}


def decision_outcomes(cat: Catalogue, model: str, *, species_id: int | None = None,
                      with_ranks: bool = False) -> tuple[np.ndarray, ...]:
    """(scores shown, outcome[, rank shown]) of standing same / not-same decisions made with ``model``."""
    with cat.unit_of_work() as s:
        q = (select(MatchDecision.score, MatchDecision.decision, MatchDecision.rank)
             .join(Image, Image.id == MatchDecision.query_image_id)
             .where(MatchDecision.model_name == model, MatchDecision.undone_at.is_(None),
                    MatchDecision.score.is_not(None),
                    MatchDecision.decision.in_([DecisionKind.same, DecisionKind.not_same])))
        if species_id is not None:
            q = q.where(Image.species_id == species_id)
        rows = s.execute(q).all()
    scores = np.array([r[0] for r in rows], dtype=np.float64)
    outcomes = np.array([1 if r[1] == DecisionKind.same else 0 for r in rows], dtype=np.int64)
    if not with_ranks:
        return scores, outcomes
    return scores, outcomes, np.array([r[2] if r[2] else 1 for r in rows], dtype=np.float64)


def top_k_outcomes(sim: np.ndarray, valid: np.ndarray, labels: list[Any], *, top_k: int = 5,
                   query_labels: list[Any] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(score, same?, rank) of each query's top-``k`` valid candidates in a query x gallery score matrix;
    ``labels`` are the gallery's, ``query_labels`` the rows' (default: the same, for an all-vs-all matrix)."""
    sim = np.where(valid, np.asarray(sim, dtype=np.float64), -np.inf)
    labels_arr = np.asarray(labels, dtype=object)
    query_arr = labels_arr if query_labels is None else np.asarray(query_labels, dtype=object)
    k = min(top_k, max(1, sim.shape[1] - 1))
    top = np.argsort(-sim, axis=1)[:, :k]
    scores, same, ranks = [], [], []
    for q in range(sim.shape[0]):
        for rank, g in enumerate(top[q], start=1):
            if np.isfinite(sim[q, g]):
                scores.append(sim[q, g])
                same.append(int(query_arr[q] == labels_arr[g]))
                ranks.append(rank)
    return np.array(scores), np.array(same), np.array(ranks, dtype=np.float64)


def benchmark_outcomes(cat: Catalogue, model: str, benchmark: str, *, top_k: int = 5,
                       with_ranks: bool = False) -> tuple[np.ndarray, ...]:
    """(score, same?[, rank]) of each test query's top-``k`` candidates (same-sighting photos excluded)."""
    data, _, sim, valid = test_split_scores(cat, model, benchmark)
    scores, same, ranks = top_k_outcomes(sim, valid, data.labels, top_k=top_k)
    return (scores, same, ranks) if with_ranks else (scores, same)


CATALOGUE_PAIRS_MAX_PHOTOS = 3000  # the identified photos scored all-vs-all for the catalogue's own pairs


def catalogue_outcomes(cat: Catalogue, model: str, *, species_id: int, top_k: int = 5) -> tuple[np.ndarray, ...]:
    """(score, same?, rank) of the top-``k`` candidates of each identified photo among the other identified
    photos (same-sighting photos excluded): what the catalogue itself knows before any benchmark exists."""
    ids = gallery_image_ids(cat, species_id=species_id)[:CATALOGUE_PAIRS_MAX_PHOTOS]
    with cat.unit_of_work() as s:
        rows = {r.id: r for r in s.execute(select(Image.id, Image.individual_id, Image.sighting_id)
                                           .where(Image.id.in_(ids))).all()}
    labels = [rows[i].individual_id for i in ids]
    if len(set(labels)) < 2 or len(ids) < 3:
        return np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0)
    backbone = get_backbone(cat, model)
    emb = embed_images(cat, ids, backbone=backbone)
    sightings = [rows[i].sighting_id for i in ids]
    # the same photos, features and identities give the same pairs: a decision that leaves them as they were
    # (one "not the same") recalibrates without scoring every identified photo against every other again
    key = (backbone.config.metric, hashlib.sha256(np.ascontiguousarray(emb).tobytes()).hexdigest(), tuple(labels),
           tuple(sightings), top_k)
    hit = _PAIRS.get(key)
    if hit is not None:
        return hit
    sim = pairwise_scores(emb, emb, metric=backbone.config.metric)
    valid = all_vs_all_valid(len(ids), sightings=sightings if any(sightings) else None)
    out = top_k_outcomes(sim, valid, labels, top_k=top_k)
    for array in out:
        array.setflags(write=False)  # shared by every later caller with the same photos
    if len(_PAIRS) >= 16:
        _PAIRS.pop(next(iter(_PAIRS)))
    _PAIRS[key] = out
    return out


def _species_benchmark(cat: Catalogue, species_id: int) -> str | None:

    with cat.unit_of_work() as s:
        return s.scalar(select(Benchmark.name).where(
            (Benchmark.species_id == species_id) | Benchmark.species_id.is_(None)).order_by(Benchmark.id.desc()))


def calibrator_for(cat: Catalogue, model: str, *, species_id: int = DEFAULT_SPECIES_ID,
                   benchmark: str | None = None, allow_stale: bool = False) -> Calibrator | None:
    """The calibrator of ``model`` for a species (core.identify.calibration.fit_match_calibrator: Platt on score and
    rank while outcomes are few), its held-out discrimination measured: its decisions, topped up while there are
    fewer than :data:`ENOUGH_DECISIONS` with benchmark top-5 pairs, or the catalogue's own identified photos' top-5
    pairs when no benchmark exists. None when nothing gives a fit (:func:`calibration_refusal` says why).
    ``allow_stale``: see :func:`calibration_state`."""
    return calibration_state(cat, model, species_id=species_id, benchmark=benchmark, allow_stale=allow_stale)[0]


def calibration_state(cat: Catalogue, model: str, *, species_id: int = DEFAULT_SPECIES_ID,
                      benchmark: str | None = None, allow_stale: bool = False) -> tuple[Calibrator | None, str | None]:
    """(the calibrator, None), or (None, why there is none and what to do, in a curator's words).

    ``allow_stale`` (a review screen, drawn after every decision): a calibration resting on at least
    :data:`STALE_MIN_PAIRS` pairs is reused while the decisions and identified photos since differ by at most
    :data:`STALE_FRACTION` of its pairs, and refitted in the background meanwhile; the screen names the outcomes it
    rests on. Refitting with its held-out check costs about a second per decision at a thousand photos, while one
    more pair among a thousand cannot move it visibly."""
    scores, outcomes, ranks = decision_outcomes(cat, model, species_id=species_id, with_ranks=True)
    bench = benchmark or (_species_benchmark(cat, species_id) if scores.size < ENOUGH_DECISIONS else None)
    few = scores.size < ENOUGH_DECISIONS
    n_identified = _identified_photos(cat, species_id) if few and not bench else 0
    key = (str(cat.data_dir), model, species_id, scores.size, float(scores.sum()) if scores.size else 0.0,
           int(outcomes.sum()) if outcomes.size else 0, bench, n_identified)
    if key in _CACHE:
        return _CACHE[key]
    line = (str(cat.data_dir), model, species_id, benchmark)
    latest = _LATEST.get(line)
    if allow_stale and latest is not None:
        n_decided, n_ident, n_pairs, state = latest
        drift = abs(scores.size - n_decided) + abs(n_identified - n_ident) * TOP_K_PAIRS
        if state[0] is not None and n_pairs >= STALE_MIN_PAIRS and drift <= STALE_FRACTION * n_pairs:
            _refit_later(cat, model, species_id=species_id, benchmark=benchmark)
            return state
    sources = {"decisions": int(scores.size)}
    extra = None
    if few and bench:
        extra, label = benchmark_outcomes(cat, model, bench, with_ranks=True), f"benchmark {bench} top-5 pairs"
    elif few and n_identified:
        extra, label = catalogue_outcomes(cat, model, species_id=species_id), "identified photos' top-5 pairs"
    if extra is not None and extra[0].size:
        scores, outcomes, ranks = (np.concatenate([a, b]) for a, b in zip((scores, outcomes, ranks), extra))
        sources[label] = int(extra[0].size)
    try:
        cal = fit_match_calibrator(scores, outcomes, ranks=ranks, sources=sources)
    except ValueError:
        state: tuple[Calibrator | None, str | None] = (None, _refusal_words(model, sources, outcomes))
    else:
        cal.discrimination = discrimination(scores, outcomes, ranks=ranks)
        state = (cal, None)
    _CACHE[key] = state
    _LATEST[line] = (int(key[3]), n_identified, int(outcomes.size), state)
    return state


def _refit_later(cat: Catalogue, model: str, *, species_id: int, benchmark: str | None) -> None:
    """Fit the current calibration in a background thread (one at a time per model and species); the screens read
    it from the cache once it is there."""
    line = (str(cat.data_dir), model, species_id, benchmark)
    with _REFIT_LOCK:
        if line in _REFITTING:
            return
        _REFITTING.add(line)

    def refit() -> None:
        try:
            calibration_state(cat, model, species_id=species_id, benchmark=benchmark)
        except Exception:  # noqa: BLE001 - a background refresh: the next exact call computes (and reports) it
            log.exception("background recalibration of %s failed", model)
        finally:
            with _REFIT_LOCK:
                _REFITTING.discard(line)

    threading.Thread(target=refit, name=f"rosette-recalibrate-{model}", daemon=True).start()


def _refusal_words(model: str, sources: dict[str, int], outcomes: np.ndarray) -> str:
    n, same = int(outcomes.size), int(outcomes.sum())
    parts = ", ".join(f"{k} {what}" for what, k in sources.items())
    if n and same == 0:
        missing = "none of them is the same animal: confirm a match with 'Same' in Match review"
    elif n and same == n:
        missing = "all of them are the same animal: say 'Not the same' to a wrong candidate in Match review"
    else:
        missing = "decide matches in Match review ('Same' and 'Not the same'), or identify photos of two or " \
                  "more individuals"
    return (f"model {model!r} has no calibration yet, so its scores cannot be read as probabilities: it needs at "
            f"least {MIN_PLATT_OUTCOMES} pairs of known outcome with both the same and different animals among "
            f"them, and has {n} ({parts}; {same} the same animal); {missing}")


def calibration_refusal(cat: Catalogue, model: str, *, species_id: int = DEFAULT_SPECIES_ID) -> str | None:
    """Why ``model`` has no calibration for the species, in a curator's words (None when it has one): the one
    sentence the command line, the Population tab and the job all give."""
    return calibration_state(cat, model, species_id=species_id)[1]


def _identified_photos(cat: Catalogue, species_id: int) -> int:
    from sqlalchemy import func

    with cat.unit_of_work() as s:
        return int(s.scalar(select(func.count(Image.id)).where(Image.individual_id.is_not(None),
                                                              Image.species_id == species_id)) or 0)


def new_individual_threshold(cat: Catalogue, species_id: int = DEFAULT_SPECIES_ID) -> float:
    with cat.unit_of_work() as s:
        sp = s.get(Species, species_id)
        return float(sp.new_individual_threshold) if sp and sp.new_individual_threshold is not None \
            else DEFAULT_NEW_THRESHOLD


def set_new_individual_threshold(cat: Catalogue, value: float, species_id: int = DEFAULT_SPECIES_ID) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError("the threshold must be a probability between 0 and 1") from None
    if not 0.0 <= v <= 1.0:
        raise ValueError("the threshold must be a probability between 0 and 1")
    with cat.unit_of_work() as s:
        sp = s.get(Species, species_id)
        if sp is None:
            raise ValueError(f"no species {species_id}")
        sp.new_individual_threshold = v
        s.commit()
    return v


def calibration_report(cat: Catalogue, model: str, *, species_id: int = DEFAULT_SPECIES_ID) -> dict[str, Any] | None:
    """What the Models tab shows: the reliability diagram on the outcomes the calibrator rests on
    (in-sample), how many decisions and benchmark pairs, and the curve score -> probability."""
    cal = calibrator_for(cat, model, species_id=species_id)
    if cal is None:
        return None
    scores, outcomes, ranks = decision_outcomes(cat, model, species_id=species_id, with_ranks=True)
    if cal.method == "isotonic":
        grid = np.linspace(float(cal.model.X_min_), float(cal.model.X_max_), 50)
    else:  # the top candidate's curve (rank 1) over the scores seen
        lo, hi = (float(scores.min()), float(scores.max())) if scores.size else (-1.0, 1.0)
        grid = np.linspace(lo, hi if hi > lo else lo + 1.0, 50)
    rel = reliability(cal.probability(scores, ranks), outcomes) if scores.size else None
    return {"model": model, "n_outcomes": cal.n_outcomes, "n_positive": cal.n_positive, "sources": cal.sources,
            "method": cal.describe(),
            "curve": {"score": grid.tolist(), "probability": cal.probability(grid).tolist()},
            "reliability_on_decisions": rel}
