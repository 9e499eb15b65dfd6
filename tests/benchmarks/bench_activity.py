"""Speed of diel activity and overlap at 10,000 detections per group (core.field.activity)."""

from __future__ import annotations

import statistics
import time

import numpy as np

from core.field.activity import TWO_PI, bootstrap_overlap, fit_activity, overlap

N_DETECTIONS = 10_000
N_RESAMPLES = 200


def _two_groups() -> tuple[np.ndarray, np.ndarray]:
    """A crepuscular and a diurnal pattern (von Mises mixtures), 10,000 times each, seeded."""
    rng = np.random.default_rng(0)
    half = N_DETECTIONS // 2
    dusk_and_dawn = np.concatenate([rng.vonmises(TWO_PI * 6 / 24, 6.0, half),
                                    rng.vonmises(TWO_PI * 18 / 24, 6.0, N_DETECTIONS - half)])
    daytime = rng.vonmises(TWO_PI * 13 / 24, 1.5, N_DETECTIONS)
    return np.mod(dusk_and_dawn, TWO_PI), np.mod(daytime, TWO_PI)


def _median_s(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run() -> list[dict]:
    a, b = _two_groups()
    note = f"{N_DETECTIONS:,} detections per group, two groups, median of 5"

    def density() -> None:
        fit_activity(a).curve(n_grid=512, per_hour=True)

    def density_and_overlap() -> None:
        fit_a, fit_b = fit_activity(a), fit_activity(b)
        fit_a.curve(n_grid=512), fit_b.curve(n_grid=512)
        overlap(fit_a, fit_b)

    t0 = time.perf_counter()
    bootstrap_overlap(a, b, n_resamples=N_RESAMPLES, seed=0)
    boot_s = time.perf_counter() - t0
    return [
        {"benchmark": "activity density (bandwidth + 512-point curve), one group", "value": _median_s(density),
         "unit": "s", "goal": "< 1 s", "note": note},
        {"benchmark": "activity of two groups + overlap Dhat1/Dhat4/Dhat5, no bootstrap",
         "value": _median_s(density_and_overlap), "unit": "s", "goal": "< 1 s", "note": note},
        {"benchmark": f"smoothed bootstrap of the overlap, {N_RESAMPLES} resamples",
         "value": boot_s, "unit": "s", "goal": "",
         "note": f"{N_DETECTIONS:,} per group, each resample drawn from the fitted densities and estimated again"},
    ]
