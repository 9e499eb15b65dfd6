"""Calibration on nyala (issue 14, item 3): expected calibration error and how well one query's candidates are
told apart, for isotonic regression against Platt scaling (score; score and rank).

The test split of the shared benchmark protocol (identity split, test fraction 0.3, seed 0, same-sighting photos
excluded) is scored all-vs-all with the default backbone; each query's top-5 candidates give (score, rank, same?).
The queries are split in two seeded halves: the calibrators are fitted on one half and measured on the other
(ECE with 10 bins; spread = mean standard deviation of a query's five probabilities; "all equal" = share of
queries whose five probabilities read the same at two decimals, as match review shows them).
"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NYALA = Path(os.environ.get("ROSETTE_BENCH_NYALA", ROOT.parent / "shared" / "data" / "nyala"))
DEMO = ROOT / "assets" / "demo"


def _folder() -> tuple[Path, str]:
    for folder in (NYALA, DEMO):
        path = folder / "manifest.csv"
        if path.exists():
            with open(path, newline="") as fh:
                n = sum(1 for r in csv.DictReader(fh) if (folder / "images" / r["filename"]).exists())
            if n:
                return folder, f"{'nyala' if folder == NYALA else 'assets/demo'} ({n} photos)"
    raise FileNotFoundError(f"no nyala photos at {NYALA} or {DEMO}")


def run() -> list[dict]:
    from core.identify.backbones import DEFAULT_BACKBONE
    from core.identify.calibration import fit_calibrator, fit_platt, reliability, spread
    from db.identify.benchmarks import create_benchmark
    from db.identify.calibration import top_k_outcomes
    from db.identify.compare import test_split_scores
    from db.session import open_catalogue

    folder, data_note = _folder()
    with tempfile.TemporaryDirectory(prefix="rosette-bench-calibration-") as tmp:
        cat = open_catalogue(Path(tmp) / "data")
        try:
            create_benchmark(cat, "nyala", manifest=folder / "manifest.csv", split="identity", test_fraction=0.3,
                             seed=0, user="bench")
            t0 = time.perf_counter()
            data, _, sim, valid = test_split_scores(cat, DEFAULT_BACKBONE, "nyala")
            t_score = time.perf_counter() - t0
        finally:
            cat.close()
    n_q = sim.shape[0]
    half = np.random.default_rng(0).permutation(n_q)
    fit_q, test_q = np.sort(half[: n_q // 2]), np.sort(half[n_q // 2:])
    labels = np.asarray(data.labels, dtype=object)

    def outcomes(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
        """The top-5 (score, same?, rank) of these queries against every test photo, and per query (score, rank)."""
        s, y, r = top_k_outcomes(sim[rows], valid[rows], list(labels), query_labels=list(labels[rows]), top_k=5)
        starts = np.flatnonzero(r == 1)  # each query's list starts at rank 1
        return s, y, r, [np.column_stack(pair) for pair in zip(np.split(s, starts[1:]), np.split(r, starts[1:]))]

    fs, fy, fr, _ = outcomes(fit_q)
    ts, ty, tr, per_query = outcomes(test_q)
    fitted = {
        "isotonic (before)": (fit_calibrator(fs, fy), False),
        "Platt, score": (fit_platt(fs, fy), False),
        "Platt, score and rank (match review now)": (fit_platt(fs, fy, ranks=fr), True),
    }
    rows: list[dict] = []
    note = (f"{data_note}; {DEFAULT_BACKBONE}; fitted on {len(fit_q)} queries' top-5 ({fy.size} pairs, "
            f"{int(fy.sum())} same), measured on the other {len(test_q)}")
    for name, (cal, with_rank) in fitted.items():
        p = cal.probability(ts, tr if with_rank else None)
        rel = reliability(p, ty)
        shown = [cal.probability(q[:, 0], q[:, 1] if with_rank else None) for q in per_query]
        sp = spread(shown)
        rows.append({"benchmark": f"calibration ECE, {name}", "value": rel["ece"], "unit": "", "note": note})
        rows.append({"benchmark": f"calibration spread within a query's top 5, {name}", "value": sp["mean_std"],
                     "unit": "std", "note": f"{100 * sp['all_equal']:.0f}% of queries read one probability for all "
                                            f"five candidates (two decimals)"})
    rows.append({"benchmark": "calibration: scoring the test split", "value": t_score, "unit": "s",
                 "note": f"{n_q} photos all-vs-all"})
    return rows


if __name__ == "__main__":
    for r in run():
        print(r)
