"""SCR density fit at camera-trap scale: a proximity study of 25 cameras, 10 occasions and 50 detected animals on a
64 x 64 trapbuffer mask (HN, full likelihood), timed in a fresh process with its peak resident memory (ru_maxrss,
the whole process: Python, numpy and scipy included). Goal: under 10 s on 2 cores and under 1 GB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from core.field.density import fit_density
from core.field.scr_simulate import grid_traps, simulate_study
sigma = 1000.0
rng = np.random.default_rng(1)
traps = grid_traps(25, spacing_m=1.5 * sigma, n_occasions=10)
while True:
    study = simulate_study(traps, density_per_ha=0.0035, detectfn="HN", detection=0.2, sigma_m=sigma,
                           detector="proximity", buffer_m=4 * sigma, rng=rng)
    animals = sorted({c.animal for c in study.captures})
    if len(animals) >= 50:
        break
keep = set(animals[:50])
captures = [c for c in study.captures if c.animal in keep]
rows = {}
for label, check in (("fit", False), ("fit and buffer check (two fits)", True)):
    t0, c0 = time.perf_counter(), time.process_time()
    fit = fit_density(captures, traps, detector="proximity", detectfn="HN", buffer_m=4 * sigma, check_buffer=check)
    rows[label] = {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"rows": rows, "peak_mb": peak, "mask_points": fit.mask.points, "n": fit.n_animals,
                  "detections": fit.n_detections, "D_per_100km2": fit.density_per_100km2.value}))
"""


def run() -> list[dict]:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(ROOT)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    note = (f"{found['n']} animals, {found['detections']} detections, 25 cameras x 10 occasions, "
            f"{found['mask_points']} mask points (64 across)")
    rows = [{"benchmark": f"SCR proximity HN {label}", "value": r["seconds"], "unit": "s",
             "goal": "< 10 s on 2 cores" if label == "fit" else "", "note": f"{note}; CPU {r['cpu']:.1f} s"}
            for label, r in found["rows"].items()]
    rows.append({"benchmark": "SCR proximity fit: peak resident memory", "value": found["peak_mb"], "unit": "MB",
                 "goal": "< 1024 MB", "note": "ru_maxrss of the whole fresh process"})
    return rows
