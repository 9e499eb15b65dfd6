"""Calibrated confidence: raw match scores -> "probability this is the same animal".

Isotonic regression (scikit-learn ``IsotonicRegression``, increasing, clipped to [0, 1]) of scores against
same (1) / not-same (0) outcomes; it is monotone in the score by construction, so the ranking never changes,
only how a score reads. :func:`reliability` bins predictions and reports the observed rate per bin (the
reliability diagram) and the expected calibration error ECE = sum_b (n_b / n) |observed_b - predicted_b|.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

MIN_OUTCOMES = 10


@dataclass
class Calibrator:
    """A fitted score -> probability map with what it rests on."""

    model: Any
    n_outcomes: int
    n_positive: int
    sources: dict[str, int] = field(default_factory=dict)

    def probability(self, scores: np.ndarray | list[float]) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64).reshape(-1)
        return np.clip(self.model.predict(s), 0.0, 1.0)


def fit_calibrator(scores: np.ndarray | list[float], outcomes: np.ndarray | list[int], *,
                   sources: dict[str, int] | None = None) -> Calibrator:
    """Isotonic fit of outcomes (1 same, 0 not) on scores; needs both outcomes and MIN_OUTCOMES pairs."""
    from sklearn.isotonic import IsotonicRegression

    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(outcomes, dtype=np.float64).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores but {y.size} outcomes")
    keep = np.isfinite(s)
    s, y = s[keep], y[keep]
    if s.size < MIN_OUTCOMES or len(np.unique(y)) < 2:
        raise ValueError(f"calibration needs at least {MIN_OUTCOMES} decisions with both 'same' and 'not the same' "
                         f"among them; there are {s.size} ({int(y.sum())} same)")
    model = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0).fit(s, y)
    return Calibrator(model=model, n_outcomes=int(s.size), n_positive=int(y.sum()), sources=dict(sources or {}))


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
