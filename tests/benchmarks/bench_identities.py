"""Speed of the multiple imputation of identities (core.field.identities): 200 draws of M0, Mt and Mh-Chao on
1,000 detections of 100 individuals, 30% of them unreviewed with synthetic match probabilities.

With ../shared present, also what the review priority buys on real photos: 20 simulated studies whose every
detection is a real nyala photo (Rosette's own match probabilities: the default backbone, its calibrator and
p(new)), the 20 top-priority reviews against 20 random ones (tests/identity_sim.py). A measurement, not a test:
how much any ranking can gain depends on how sharply the model's probabilities tell the animals apart, which the
row's note gives."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from core.field import identities as ids
from tests import identity_sim
from tests.conftest import SHARED_NYALA_DIR, shared_nyala_present
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
    rows = _speed_rows(inp, impute_s, priority_s)
    return rows + _real_photo_rows()


def _speed_rows(inp: ids.ImputationInput, impute_s: float, priority_s: float) -> list[dict]:
    note = f"1,000 detections of 100 individuals, 10 occasions, {len(inp.units)} unreviewed"
    return [
        {"benchmark": f"imputation, {DRAWS} draws of M0, Mt and Mh-Chao", "value": impute_s, "unit": "s",
         "goal": "< 5 s", "note": note},
        {"benchmark": "review priority from those draws", "value": priority_s, "unit": "s", "goal": "", "note": note},
    ]


def _real_photo_rows(studies: int = 20) -> list[dict]:
    name = "review priority on real nyala photos: width after 20 top-priority vs 20 random reviews"
    if not shared_nyala_present():
        return [{"benchmark": name, "value": "-", "unit": "", "note": "not measured: ../shared/data/nyala is absent"}]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        bank = identity_sim.nyala_bank(SHARED_NYALA_DIR, cache_dir=Path(tmp))
        r = identity_sim.review_comparison(identity_sim.simulate_photos(2000 + s, bank, removed=0.3)
                                           for s in range(studies))
        took = time.perf_counter() - t0
    return [{"benchmark": name, "value": f"{r['top_width']:.1f} vs {r['random_width']:.1f}", "unit": "",
             "note": f"{studies} studies of 60 animals, 30% unreviewed; narrowed {r['top_narrow']:.1f} vs "
                     f"{r['random_narrow']:.1f}, paired Wilcoxon p = {r['p_narrow']:.2g}; the median open "
                     f"annotation's most probable animal has p = {r['median_top_probability']:.2f}; "
                     f"{took:.0f} s with the embedding"}]
