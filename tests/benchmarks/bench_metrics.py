"""Speed of the metrics/diagnostics core at nyala scale (1,213 images, all-vs-all)."""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path

import numpy as np

from core.inspect.diagnostics import flank_protocols, laterality
from core.metrics import all_vs_all_metrics
from core.identify.stats import rank_correlation

NYALA_MANIFEST = Path(__file__).resolve().parents[3] / "shared" / "data" / "nyala" / "manifest.csv"


def _nyala_like() -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Labels, sightings and flanks of nyala (or a synthetic stand-in of the same size)."""
    if NYALA_MANIFEST.exists():
        with open(NYALA_MANIFEST, newline="") as fh:
            rows = list(csv.DictReader(fh))
        return (
            np.array([r["identity"] for r in rows]),
            np.array([r["sighting"] for r in rows]),
            np.array([r["flank"] for r in rows]),
            "nyala labels",
        )
    rng = np.random.default_rng(0)
    n = 1213
    return (
        rng.integers(0, 240, n).astype(str),
        rng.integers(0, 600, n).astype(str),
        np.where(rng.random(n) < 0.5, "left", "right"),
        "synthetic labels",
    )


def _median_ms(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


def run() -> list[dict]:
    labels, sightings, flanks, source = _nyala_like()
    n = labels.size
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(n, 256)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    flipped = emb + 0.1 * rng.normal(size=emb.shape).astype(np.float32)
    sim = emb @ emb.T
    note = f"{n} x {n}, {source}, random 256-d embeddings, median of 5"
    return [
        {
            "benchmark": "all_vs_all_metrics, same sighting excluded",
            "value": _median_ms(lambda: all_vs_all_metrics(sim, labels, sightings=sightings)),
            "unit": "ms",
            "goal": "< 1000 ms",
            "note": note,
        },
        {
            "benchmark": "all_vs_all_metrics, 1-decimal scores (many ties)",
            "value": _median_ms(lambda: all_vs_all_metrics(np.round(sim, 1), labels)),
            "unit": "ms",
            "goal": "< 1000 ms",
            "note": note,
        },
        {
            "benchmark": "flank_protocols (within + cross)",
            "value": _median_ms(lambda: flank_protocols(sim, labels, flanks)),
            "unit": "ms",
            "goal": "< 1000 ms",
            "note": note,
        },
        {
            "benchmark": "laterality (cosine)",
            "value": _median_ms(lambda: laterality(emb, flipped, labels)),
            "unit": "ms",
            "goal": "< 1000 ms",
            "note": note,
        },
        {
            "benchmark": "rank_correlation kendall, n=50, 2000 resamples",
            "value": _median_ms(lambda: rank_correlation(rng.random(50), rng.random(50), method="kendall"), 3),
            "unit": "ms",
            "goal": "< 1000 ms",
            "note": "seeded percentile bootstrap",
        },
    ]
