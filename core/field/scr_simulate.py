"""Simulated SCR studies with a known density, to check the estimator (bias, interval coverage) and to time it.

Activity centres are a Poisson process of intensity D over the detectors' extent widened by ``buffer_m``; each
animal is detected as the likelihood in :mod:`core.field.scr_likelihood` assumes (Bernoulli, Poisson or competing
hazards per occasion, with each detector's usage).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from core.field.capthist import Trap
from core.field.scr_data import Capture
from core.field.scr_likelihood import detection_hazard


@dataclass(frozen=True)
class SimulatedStudy:
    traps: list[Trap]
    captures: list[Capture]
    n_population: int  # animals whose centres lie in the simulated region
    region_area_ha: float


def grid_traps(n_detectors: int, *, spacing_m: float, columns: int = 5, n_occasions: int,
               usage: np.ndarray | None = None) -> list[Trap]:
    """``n_detectors`` on a grid of ``columns`` columns, filled row by row, each used once per occasion unless
    ``usage`` (K, S) says otherwise."""
    use = np.ones((n_detectors, n_occasions)) if usage is None else np.asarray(usage, dtype=float)
    return [Trap(name=f"C{k + 1:02d}", x=float((k % columns) * spacing_m), y=float((k // columns) * spacing_m),
                 usage=tuple(float(u) for u in use[k])) for k in range(n_detectors)]


def simulate_study(traps: list[Trap], *, density_per_ha: float, detectfn: str, detection: float, sigma_m: float,
                   detector: str, buffer_m: float, rng: np.random.Generator) -> SimulatedStudy:
    """One study: detections of a Poisson population at ``traps`` (``detection`` is g0, or lambda0 for HHN)."""
    xy = np.array([[t.x, t.y] for t in traps])
    usage = np.array([t.usage for t in traps], dtype=float)  # (K, S)
    lo, hi = xy.min(axis=0) - buffer_m, xy.max(axis=0) + buffer_m
    area_ha = float(np.prod(hi - lo)) / 10_000.0
    n_pop = int(rng.poisson(density_per_ha * area_ha))
    centres = lo + rng.random((n_pop, 2)) * (hi - lo)
    d2 = ((centres[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2)
    hazard = detection_hazard(detectfn, detection, sigma_m, d2)[:, None, :] * usage.T[None, :, :]  # (N, S, K)
    if detector == "proximity":
        counts = (rng.random(hazard.shape) < -np.expm1(-hazard)).astype(int)
    elif detector == "count":
        counts = rng.poisson(hazard)
    elif detector == "multi":
        total = hazard.sum(axis=2)  # (N, S)
        caught = rng.random(total.shape) < -np.expm1(-total)
        cumulative = np.cumsum(hazard, axis=2) / np.maximum(total, 1e-300)[:, :, None]
        which = (rng.random(total.shape)[:, :, None] > cumulative).sum(axis=2)
        counts = np.zeros(hazard.shape, dtype=int)
        i, s = np.nonzero(caught)
        counts[i, s, np.minimum(which[i, s], hazard.shape[2] - 1)] = 1
    else:
        raise ValueError(f"detector {detector!r} unknown")
    captures = []
    for i, s, k in zip(*np.nonzero(counts)):
        captures.extend([Capture(session="1", animal=f"A{i + 1:04d}", occasion=int(s) + 1,
                                 detector=traps[k].name)] * int(counts[i, s, k]))
    return SimulatedStudy(traps=traps, captures=captures, n_population=n_pop, region_area_ha=area_ha)
