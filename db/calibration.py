"""Calibrated confidence per model and species, from the curators' same / not-same decisions, topped up with
a benchmark's top-5 candidate pairs while decisions are few (what a curator sees in match review)."""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import select

from core.calibration import Calibrator, fit_calibrator
from db.models import DEFAULT_SPECIES_ID, DecisionKind, Image, MatchDecision, Species
from db.session import Catalogue

ENOUGH_DECISIONS = 50  # below this, benchmark pairs are added
DEFAULT_NEW_THRESHOLD = 0.5
_CACHE: dict[tuple, Calibrator] = {}


def decision_outcomes(cat: Catalogue, model: str, *, species_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores shown, outcome) of standing same / not-same decisions made with ``model``."""
    with cat.unit_of_work() as s:
        q = (select(MatchDecision.score, MatchDecision.decision).join(Image, Image.id == MatchDecision.query_image_id)
             .where(MatchDecision.model_name == model, MatchDecision.undone_at.is_(None),
                    MatchDecision.score.is_not(None),
                    MatchDecision.decision.in_([DecisionKind.same, DecisionKind.not_same])))
        if species_id is not None:
            q = q.where(Image.species_id == species_id)
        rows = s.execute(q).all()
    scores = np.array([r[0] for r in rows], dtype=np.float64)
    outcomes = np.array([1 if r[1] == DecisionKind.same else 0 for r in rows], dtype=np.int64)
    return scores, outcomes


def benchmark_outcomes(cat: Catalogue, model: str, benchmark: str, *, top_k: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """(score, same?) of each test query's top-``k`` candidates (same-sighting photos excluded)."""
    from db.compare import test_split_scores

    data, _, sim, valid = test_split_scores(cat, model, benchmark)
    sim = np.where(valid, sim.astype(np.float64), -np.inf)
    labels = np.asarray(data.labels)
    k = min(top_k, max(1, sim.shape[1] - 1))
    top = np.argsort(-sim, axis=1)[:, :k]
    scores, same = [], []
    for q in range(sim.shape[0]):
        for g in top[q]:
            if np.isfinite(sim[q, g]):
                scores.append(sim[q, g])
                same.append(int(labels[q] == labels[g]))
    return np.array(scores), np.array(same)


def _species_benchmark(cat: Catalogue, species_id: int) -> str | None:
    from db.models import Benchmark

    with cat.unit_of_work() as s:
        return s.scalar(select(Benchmark.name).where(
            (Benchmark.species_id == species_id) | Benchmark.species_id.is_(None)).order_by(Benchmark.id.desc()))


def calibrator_for(cat: Catalogue, model: str, *, species_id: int = DEFAULT_SPECIES_ID,
                   benchmark: str | None = None) -> Calibrator | None:
    """The calibrator of ``model`` for a species: its decisions, plus benchmark top-5 pairs while there are
    fewer than :data:`ENOUGH_DECISIONS`. None when neither gives enough outcomes."""
    scores, outcomes = decision_outcomes(cat, model, species_id=species_id)
    bench = benchmark or (_species_benchmark(cat, species_id) if scores.size < ENOUGH_DECISIONS else None)
    key = (str(cat.data_dir), model, species_id, scores.size, float(scores.sum()) if scores.size else 0.0, bench)
    if key in _CACHE:
        return _CACHE[key]
    sources = {"decisions": int(scores.size)}
    if bench and scores.size < ENOUGH_DECISIONS:
        bs, bo = benchmark_outcomes(cat, model, bench)
        scores, outcomes = np.concatenate([scores, bs]), np.concatenate([outcomes, bo])
        sources[f"benchmark {bench} top-5 pairs"] = int(bs.size)
    try:
        cal = fit_calibrator(scores, outcomes, sources=sources)
    except ValueError:
        return None
    _CACHE[key] = cal
    return cal


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
    from core.calibration import reliability

    cal = calibrator_for(cat, model, species_id=species_id)
    if cal is None:
        return None
    scores, outcomes = decision_outcomes(cat, model, species_id=species_id)
    grid = np.linspace(float(cal.model.X_min_), float(cal.model.X_max_), 50)
    rel = reliability(cal.probability(scores), outcomes) if scores.size else None
    return {"model": model, "n_outcomes": cal.n_outcomes, "n_positive": cal.n_positive, "sources": cal.sources,
            "curve": {"score": grid.tolist(), "probability": cal.probability(grid).tolist()},
            "reliability_on_decisions": rel}
