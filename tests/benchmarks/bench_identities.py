"""Speed of the multiple imputation of identities (core.field.identities): 200 draws of M0, Mt and Mh-Chao on
1,000 detections of 100 individuals, 30% of them unreviewed with synthetic match probabilities."""

from __future__ import annotations

import time

from core.field import identities as ids
from tests.identity_sim import benchmark_input

DRAWS = 200


def run() -> list[dict]:
    inp = benchmark_input(0, detections=1000, individuals=100, occasions=10, uncertain=0.3)
    t0 = time.perf_counter()
    result = ids.impute(inp, draws=DRAWS, seed=0)
    impute_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids.review_priority(inp, result)
    priority_s = time.perf_counter() - t0
    note = f"1,000 detections of 100 individuals, 10 occasions, {len(inp.units)} unreviewed"
    return [
        {"benchmark": f"imputation, {DRAWS} draws of M0, Mt and Mh-Chao", "value": impute_s, "unit": "s",
         "goal": "< 5 s", "note": note},
        {"benchmark": "review priority from those draws", "value": priority_s, "unit": "s", "goal": "", "note": note},
    ]
