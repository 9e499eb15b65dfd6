"""Calibrated confidence: raw match scores -> "probability this is the same animal".

Two fits, each monotone in the score, so the ranking never changes, only how a score reads: Platt scaling
(:func:`fit_platt`, smooth, usable from a handful of outcomes; match review uses it while outcomes are fewer than
:data:`ISOTONIC_FROM`) and isotonic regression (:func:`fit_calibrator`, whose thresholds the spot-evidence fusion
reads). :func:`reliability` gives the reliability diagram and ECE; :func:`spread` says how well one query's
candidates' probabilities are told apart.

Why each fit is used where it is, and the ECE formula: docs/retrieval.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MIN_OUTCOMES = 10  # isotonic
MIN_PLATT_OUTCOMES = 4  # Platt: a rough curve from the first few decisions, said to be rough
ISOTONIC_FROM = 2000  # match review switches to isotonic only when its steps are this well supported
PLATT = "platt"
ENOUGH_DECISIONS = 50  # from this many decided pairs on, the curators' decisions alone are trusted
ISOTONIC = "isotonic"


@dataclass
class Calibrator:
    """A fitted score -> probability map with what it rests on."""

    model: Any
    n_outcomes: int
    n_positive: int
    sources: dict[str, int] = field(default_factory=dict)
    method: str = ISOTONIC
    uses_rank: bool = False  # Platt on (score, log rank): pass each candidate's rank to :meth:`probability`

    def probability(self, scores: np.ndarray | list[float], ranks: np.ndarray | list[int] | None = None) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        if self.method == PLATT:
            return self.model.predict_proba(_platt_features(s, ranks if self.uses_rank else None,
                                                            with_rank=self.uses_rank))[:, 1]
        return np.clip(self.model.predict(s), 0.0, 1.0)

    def describe(self) -> str:
        """How it was fitted, in words for the match-review note."""
        if self.method == PLATT:
            return "Platt scaling (logistic on score" + (" and rank)" if self.uses_rank else ")")
        return "isotonic regression"


def _platt_features(scores: np.ndarray, ranks: np.ndarray | list[int] | None, *, with_rank: bool) -> np.ndarray:
    if not with_rank:
        return scores[:, None]
    r = np.ones_like(scores) if ranks is None else np.asarray(ranks, dtype=np.float64).reshape(-1)
    if r.shape != scores.shape:
        raise ValueError(f"{scores.size} scores but {r.size} ranks")
    return np.column_stack([scores, np.log(np.maximum(r, 1.0))])


def _checked(scores, outcomes, ranks=None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} outcomes")
    r = None if ranks is None else np.asarray(ranks, dtype=np.float64).reshape(-1)
    if r is not None and r.shape != s.shape:
        raise ValueError(f"{s.size} scores but {r.size} ranks")
    keep = np.isfinite(s) & (np.isfinite(r) if r is not None else True)
    return s[keep], y[keep], (r[keep] if r is not None else None)


def fit_calibrator(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                   sources: dict[str, int] | None = None) -> Calibrator:
    """Isotonic fit of outcomes (1 same, 0 not) on scores; needs both outcomes and MIN_OUTCOMES pairs."""
    from sklearn.isotonic import IsotonicRegression

    s, y, _ = _checked(scores, outcomes)
    if s.size < MIN_OUTCOMES or len(np.unique(y)) < 2:
        raise ValueError(f"calibration needs at least {MIN_OUTCOMES} decisions with both 'same' and 'not the same' "
                         f"among them; there are {s.size} ({int(y.sum())} same)")
    model = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(s, y)
    return Calibrator(model=model, n_outcomes=int(s.size), n_positive=int(y.sum()), sources=dict(sources or {}))


def fit_platt(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
              ranks: np.ndarray | list[int] | None = None, sources: dict[str, int] | None = None,
              strength: float = 1.0) -> Calibrator:
    """Platt scaling: logistic regression of outcomes on the standardised score (and log rank when given), with
    an L2 prior of ``strength`` (scikit-learn's C = 1 / strength).

    The probability must never reorder candidates: it has to rise with the score and not rise with the rank.
    A rank weight of the wrong sign is dropped (refit on the score alone); a score weight that is not positive
    means these outcomes do not support a calibration at all (``ValueError``)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    s, y, r = _checked(scores, outcomes, ranks)
    if s.size < MIN_PLATT_OUTCOMES or len(np.unique(y)) < 2:
        raise ValueError(f"calibration needs at least {MIN_PLATT_OUTCOMES} decisions with both 'same' and "
                         f"'not the same' among them; there are {s.size} ({int(y.sum())} same)")
    use_rank = r is not None and np.unique(r).size > 1
    for with_rank in ((True, False) if use_rank else (False,)):
        model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0 / strength))
        model.fit(_platt_features(s, r, with_rank=with_rank), y)
        w = model[-1].coef_[0]
        if w[0] > 0 and (not with_rank or w[1] <= 0):
            return Calibrator(model=model, n_outcomes=int(s.size), n_positive=int(y.sum()),
                              sources=dict(sources or {}), method=PLATT, uses_rank=with_rank)
    raise ValueError(f"these {s.size} outcomes do not rise with the score: no calibration from them yet")


def fit_match_calibrator(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                         ranks: np.ndarray | list[int] | None = None,
                         sources: dict[str, int] | None = None) -> Calibrator:
    """What match review reads: Platt (score and rank) until :data:`ISOTONIC_FROM` outcomes, isotonic after."""
    n = int(np.isfinite(np.asarray(scores, dtype=np.float64)).sum())
    if n >= ISOTONIC_FROM:
        return fit_calibrator(scores, outcomes, sources=sources)
    return fit_platt(scores, outcomes, ranks=ranks, sources=sources)


def spread(probabilities_per_query: list[np.ndarray | list[float]], *, decimals: int = 2) -> dict[str, float]:
    """How well one query's candidates are told apart: the mean standard deviation of their probabilities, and
    the share of queries whose candidates all read the same (rounded to ``decimals``, as shown)."""
    rows = [np.asarray(p, dtype=np.float64) for p in probabilities_per_query if len(p) > 1]
    if not rows:
        return {"mean_std": 0.0, "all_equal": 0.0, "n_queries": 0}
    return {"mean_std": float(np.mean([p.std() for p in rows])),
            "all_equal": float(np.mean([np.unique(np.round(p, decimals)).size == 1 for p in rows])),
            "n_queries": len(rows)}


def reliability(probabilities: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                n_bins: int = 10) -> dict[str, Any]:
    """Equal-width bins of predicted probability: per bin count, mean prediction, observed rate; and ECE."""
    p = np.asarray(probabilities, dtype=np.float64).reshape(-1)
    y = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.digitize(p, edges[1:-1], right=False), 0, n_bins - 1)
    bins = []
    ece = 0.0
    for b in range(n_bins):
        m = idx == b
        n = int(m.sum())
        if n:
            pred, obs = float(p[m].mean()), float(y[m].mean())
            ece += n / max(1, p.size) * abs(obs - pred)
            bins.append({"low": float(edges[b]), "high": float(edges[b + 1]), "n": n, "predicted": pred,
                         "observed": obs})
    return {"bins": bins, "ece": float(ece), "n": int(p.size)}
