"""Calibrated fusion of scorers over the global model's shortlist (WildFusion, wildlife-tools).

Each scorer (the global model's similarity, the verified inlier count, the LNBNN vote) speaks its own units.
Each gets an isotonic calibration (:mod:`core.identify.calibration`) into P(same individual), fitted on pairs from the
benchmark's training photos (the curators' decisions replace them once there are enough). For a query, the
global model's top-K (the *shortlist*, K default 50), joined by LNBNN's own top candidates over the whole
gallery when LNBNN is fused (:func:`joint_shortlist`: it finds animals the global model ranks too low for its
top-K), is re-scored by the mean of the calibrated probabilities of the scorers that apply to the pair (local
scorers do not apply to cross-flank pairs, or to photos without keypoints: those pairs keep the global
probability alone). Photos outside the shortlist keep the global
order, below every shortlisted one. Equal fused probabilities (isotonic curves are step functions) are ordered
by the raw global score.

A fused score with a single scorer equals that scorer's calibrated probability.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from core.identify.calibration import Calibrator, fit_calibrator

DEFAULT_SHORTLIST = 50
GLOBAL = "global"
#: Order of the raw global score inside a tie of fused probabilities: small enough never to reorder two
#: different fused values (isotonic steps differ by far more), large enough to survive float32.
TIE_BREAK = 1e-4


class ScoreFusion(Protocol):
    """How calibrated probabilities are combined (:class:`core.identify.spots.fusion_choice.Fusion`, chosen there)."""

    scorers: tuple[str, ...]
    uses_ranks: bool

    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> tuple[str, ...]: ...

    def combine(self, probabilities: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray] | None = None,
                ranks: Mapping[str, np.ndarray] | None = None) -> np.ndarray: ...


@dataclass(frozen=True)
class IsotonicCurve:
    """A fitted isotonic map kept as its breakpoints (what scikit-learn's ``IsotonicRegression.predict`` does
    between them: linear interpolation, clipped at both ends), so it can be stored as JSON with a pipeline."""

    x: tuple[float, ...]
    y: tuple[float, ...]

    def predict(self, scores: np.ndarray) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64)
        return np.interp(s, np.asarray(self.x), np.asarray(self.y))

    @classmethod
    def from_calibrator(cls, cal: Calibrator) -> IsotonicCurve:
        m = cal.model
        if isinstance(m, IsotonicCurve):
            return m
        return cls(tuple(float(v) for v in m.X_thresholds_), tuple(float(v) for v in m.y_thresholds_))


def calibrator_to_dict(cal: Calibrator) -> dict[str, Any]:
    curve = IsotonicCurve.from_calibrator(cal)
    return {"x": list(curve.x), "y": list(curve.y), "n_outcomes": cal.n_outcomes, "n_positive": cal.n_positive,
            "sources": dict(cal.sources)}


def calibrator_from_dict(data: Mapping[str, Any]) -> Calibrator:
    if len(data.get("x") or ()) < 1 or len(data["x"]) != len(data.get("y") or ()):
        raise ValueError("a stored calibration needs matching, non-empty x and y breakpoints")
    return Calibrator(model=IsotonicCurve(tuple(map(float, data["x"])), tuple(map(float, data["y"]))),
                      n_outcomes=int(data.get("n_outcomes", 0)), n_positive=int(data.get("n_positive", 0)),
                      sources=dict(data.get("sources") or {}))


def shortlist_mask(global_sim: np.ndarray, valid: np.ndarray, k: int) -> np.ndarray:
    """Q x G bool: each query's top-``k`` valid gallery items by the global score (ties: lower index first)."""
    if k < 1:
        raise ValueError(f"the shortlist needs at least 1 candidate, got {k}")
    sim = np.where(valid, np.asarray(global_sim, dtype=np.float64), -np.inf)
    order = np.argsort(-sim, axis=1, kind="stable")[:, :k]
    mask = np.zeros(sim.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=1)
    return mask & valid


def voted_top_k(votes: np.ndarray, valid: np.ndarray, k: int) -> np.ndarray:
    """Q x G bool: each query's top-``k`` valid gallery items by a scorer's own ranking of the whole gallery
    (LNBNN's votes), only items it gave a positive score (no vote chooses nothing; ties: lower index first)."""
    if k < 0:
        raise ValueError(f"the number of a scorer's own candidates must be >= 0, got {k}")
    v = np.asarray(votes, dtype=np.float64)
    use = np.asarray(valid, bool) & np.isfinite(v) & (v > 0)
    mask = np.zeros(v.shape, dtype=bool)
    if k == 0 or not use.any():
        return mask
    order = np.argsort(-np.where(use, v, -np.inf), axis=1, kind="stable")[:, :k]
    np.put_along_axis(mask, order, True, axis=1)
    return mask & use


def joint_shortlist(global_sim: np.ndarray, valid: np.ndarray, k: int, *,
                    own_candidates: Mapping[str, tuple[np.ndarray, int]] | None = None) -> np.ndarray:
    """The global top-``k`` joined by each scorer's own top candidates over the whole gallery
    (``own_candidates[name] = (its scores, how many)``): a scorer that ranks the whole gallery (LNBNN) can bring
    in the animal the global model ranked too low for its shortlist, which no re-ranking of that shortlist
    reaches."""
    short = shortlist_mask(global_sim, valid, k)
    for votes, n in (own_candidates or {}).values():
        short |= voted_top_k(votes, valid, n)
    return short


def fuse_probabilities(probabilities: Mapping[str, np.ndarray], applies: Mapping[str, np.ndarray] | None = None
                       ) -> np.ndarray:
    """Element-wise mean of the scorers' calibrated probabilities over the scorers that apply there.

    ``applies[name]`` (bool, same shape) says where a scorer applies (default: everywhere); where none
    applies the result is NaN.
    """
    if not probabilities:
        raise ValueError("fusion needs at least one scorer")
    shape = next(iter(probabilities.values())).shape
    total = np.zeros(shape, dtype=np.float64)
    count = np.zeros(shape, dtype=np.float64)
    for name, p in probabilities.items():
        p = np.asarray(p, dtype=np.float64)
        if p.shape != shape:
            raise ValueError(f"scorer {name!r} has shape {p.shape}, expected {shape}")
        use = np.ones(shape, dtype=bool) if applies is None or name not in applies else np.asarray(applies[name], bool)
        use = use & np.isfinite(p)
        total += np.where(use, p, 0.0)
        count += use
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def fused_similarity(global_sim: np.ndarray, valid: np.ndarray, *, shortlist: int,
                     raw: Mapping[str, np.ndarray], calibrators: Mapping[str, Calibrator],
                     applies: Mapping[str, np.ndarray] | None = None, fusion: ScoreFusion | None = None,
                     own_candidates: Mapping[str, tuple[np.ndarray, int]] | None = None) -> np.ndarray:
    """The fused Q x G score matrix (higher = more similar) that ranking and metrics read.

    ``raw[name]`` are the scorers' raw scores (``raw["global"]`` may be omitted: ``global_sim`` is used) and
    ``calibrators[name]`` their calibrations; only scorers with a calibrator take part. Shortlisted pairs get
    their fused probability (plus :data:`TIE_BREAK` x the global score's rank position within [0, 1));
    the rest get ``global_sim`` shifted below -1, so they keep the global order under every shortlisted pair.
    Invalid pairs are -inf. ``fusion`` (:class:`core.identify.spots.fusion_choice.Fusion`) combines the probabilities;
    None: their mean over the scorers that apply. ``own_candidates[name] = (scores, n)``: scorer ``name``'s own
    top ``n`` over the whole gallery join the shortlist (:func:`joint_shortlist`), whether or not the fusion reads
    that scorer.
    """
    g = np.asarray(global_sim, dtype=np.float64)
    valid = np.asarray(valid, dtype=bool)
    scores = dict(raw)
    scores.setdefault(GLOBAL, g)
    short = joint_shortlist(g, valid, shortlist, own_candidates=own_candidates)
    probs = {name: calibrators[name].probability(np.nan_to_num(np.asarray(scores[name], np.float64), nan=0.0)
                                                 .reshape(-1)).reshape(g.shape)
             for name in scores if name in calibrators}
    if not probs:
        raise ValueError("no scorer has a calibration")
    if fusion is None:
        fused = fuse_probabilities(probs, applies)
    else:
        missing = [s for s in fusion.needs if s not in probs]
        if missing:
            raise ValueError(f"the fusion {fusion.name!r} needs the calibrated scorers {', '.join(missing)}")
        ranks = ({s: shortlist_ranks(scores[s], short, None if applies is None else applies.get(s))
                  for s in fusion.scorers} if fusion.uses_ranks else None)
        fused = fusion.combine(probs, applies, ranks)
    return ranking_scores(g, valid, short, fused)


def ranking_scores(global_sim: np.ndarray, valid: np.ndarray, shortlist: np.ndarray, fused: np.ndarray
                   ) -> np.ndarray:
    """The score matrix ranking reads: shortlisted pairs get their ``fused`` probability (plus
    :data:`TIE_BREAK` x the global score rescaled to [0, 1]), the rest the rescaled global score shifted below
    every shortlisted pair; invalid pairs -inf."""
    g = np.asarray(global_sim, dtype=np.float64)
    valid = np.asarray(valid, bool)
    finite = np.isfinite(g) & valid
    lo, hi = (float(g[finite].min()), float(g[finite].max())) if finite.any() else (0.0, 1.0)
    unit = (g - lo) / max(hi - lo, 1e-12)  # global score rescaled to [0, 1] for tie-breaking
    out = np.where(np.asarray(shortlist, bool), np.nan_to_num(fused, nan=0.0) + TIE_BREAK * unit, unit - 2.0)
    return np.where(valid, out, -np.inf)


def shortlist_ranks(raw: np.ndarray, shortlist: np.ndarray, applies: np.ndarray | None = None) -> np.ndarray:
    """Q x G: each shortlisted pair's rank (1 = highest raw score) among its query's shortlisted pairs where the
    scorer applies (ties share the better rank); NaN elsewhere."""
    r = np.asarray(raw, np.float64)
    use = np.asarray(shortlist, bool) & np.isfinite(r)
    if applies is not None:
        use &= np.asarray(applies, bool)
    vals = np.where(use, r, -np.inf)
    # rank = 1 + the number of this query's usable pairs with a strictly higher score
    s = -np.sort(-vals, axis=1)
    out = np.empty_like(r)
    for q in range(r.shape[0]):
        out[q] = 1.0 + np.searchsorted(-s[q], -vals[q], side="left")
    return np.where(use, out, np.nan)


def fit_scorer_calibrations(raw: Mapping[str, np.ndarray], same: np.ndarray, pairs: np.ndarray,
                            applies: Mapping[str, np.ndarray] | None = None, *, source: str = "benchmark pairs"
                            ) -> dict[str, Calibrator]:
    """Isotonic calibration per scorer on the ``pairs`` (bool mask) where it applies; ``same`` marks pairs of
    one individual. A scorer without enough outcomes of both kinds is left out (it then takes no part)."""
    out: dict[str, Calibrator] = {}
    for name, r in raw.items():
        use = np.asarray(pairs, bool)
        if applies is not None and name in applies:
            use = use & np.asarray(applies[name], bool)
        r = np.asarray(r, dtype=np.float64)
        use = use & np.isfinite(r)
        try:
            out[name] = fit_calibrator(r[use], np.asarray(same)[use].astype(int), sources={source: int(use.sum())})
        except ValueError:
            continue
    return out
