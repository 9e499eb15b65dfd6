"""Speed of the density with identification uncertainty (core.field.density_draws): 50 draws of the SCR fit, each
draw's identities sampled as ``rosette density --identities uncertain`` samples them and its capture histories
rebuilt and fitted, on the camera-trap study of bench_density (25 cameras, 10 occasions, 50 detected animals, a
64 x 64 trapbuffer mask, HN, full likelihood) with 30% of the detections unreviewed (synthetic match
probabilities: the true animal 0.6, another 0.25, a new animal 0.15). Goal: under 2 minutes on 2 cores."""

from __future__ import annotations

import os
import time

import numpy as np

from core.field import density_draws as dd
from core.field import identities as ids
from core.field.density import fit_density
from core.field.scr_simulate import grid_traps, simulate_study

DRAWS = 50
SIGMA = 1000.0
UNREVIEWED = 0.3


def study() -> tuple:
    """(traps, captures of 50 animals, the decided fit, the imputation input, the draws' detections)."""
    rng = np.random.default_rng(1)
    traps = grid_traps(25, spacing_m=1.5 * SIGMA, n_occasions=10)
    while True:
        sim = simulate_study(traps, density_per_ha=0.0035, detectfn="HN", detection=0.2, sigma_m=SIGMA,
                             detector="proximity", buffer_m=4 * SIGMA, rng=rng)
        animals = sorted({c.animal for c in sim.captures})
        if len(animals) >= 50:
            break
    keep = set(animals[:50])
    captures = [c for c in sim.captures if c.animal in keep]
    decided = fit_density(captures, traps, detector="proximity", detectfn="HN", buffer_m=4 * SIGMA,
                          check_buffer=False)
    names = sorted(keep)
    index = {a: k for k, a in enumerate(names)}
    open_ = rng.random(len(captures)) < UNREVIEWED
    fixed = [(index[c.animal], c.occasion - 1) for c, o in zip(captures, open_) if not o]
    units = []
    for c in (c for c, o in zip(captures, open_) if o):
        other = int(rng.choice([k for k in range(len(names)) if k != index[c.animal]]))
        units.append(ids.UncertainUnit(key=len(units), occasions=(c.occasion - 1,),
                                       candidates=(index[c.animal], other), probabilities=(0.6, 0.25)))
    inp = ids.ImputationInput(n_occasions=10, individuals=tuple(names), fixed=fixed, units=tuple(units))
    detections = dd.DrawDetections(
        session="1", fixed=tuple((c.animal, c.occasion, c.detector) for c, o in zip(captures, open_) if not o),
        units=tuple(((c.occasion, c.detector),) for c, o in zip(captures, open_) if o), individuals=tuple(names))
    return traps, captures, decided, inp, detections


def run() -> list[dict]:
    traps, captures, decided, inp, detections = study()
    t0, cpu0 = time.perf_counter(), os.times()
    labels = ids.sample_identities(inp, DRAWS, np.random.default_rng(0))
    draws = dd.fit_draws(detections, labels, traps, mask=dd.mask_of(decided), detector="proximity", detectfn="HN",
                         conditional=False, start=dd.start_of(decided))
    combined = dd.combine_density(draws)
    seconds, cpu1 = time.perf_counter() - t0, os.times()
    user, system = cpu1.user - cpu0.user, cpu1.system - cpu0.system
    d = combined["D"]
    note = (f"{len(captures)} detections of 50 animals, {len(inp.units)} unreviewed; {decided.mask.points} mask "
            f"points; {draws.from_previous} of {DRAWS} draws converged from the previous draw's estimates; "
            f"D {d.N:.1f} ({d.ci_low:.1f} – {d.ci_high:.1f}) per 100 km² vs {decided.density_per_100km2.value:.1f} "
            f"({decided.density_per_100km2.lcl:.1f} – {decided.density_per_100km2.ucl:.1f}) as decided, "
            f"{100 * (d.share_from_identification or 0):.0f}% of the width from identification")
    return [{"benchmark": f"density with identification uncertainty, {DRAWS} draws of the SCR fit",
             "value": seconds, "unit": "s", "goal": "< 120 s on 2 cores",
             "note": f"{note}; CPU {user:.1f} s user + {system:.1f} s system (the system part: page faults of the "
                     "likelihood's large temporary arrays)"},
            {"benchmark": "one draw's fit, mean", "value": draws.seconds / DRAWS, "unit": "s", "goal": "",
             "note": "capture history rebuilt, model prepared, fitted from the previous draw's estimates"}]


if __name__ == "__main__":
    for row in run():
        print(row)
