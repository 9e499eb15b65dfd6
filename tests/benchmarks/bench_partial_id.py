"""The two-flank partial-identity model (core.field.partial_id, Augustine et al. 2018): speed, the paper's own
simulation settings, and interval coverage against a left-only fit.

- Speed and the paper's settings: N 50 activity centres in the 6 x 6 grid of stations 1 km apart widened by 2 km
  (81 km²), p0 0.13 for each flank, sigma 500 m, 10 occasions, one camera everywhere, no known links (the authors'
  test script, in metres): one fit of 3 chains x 20,000 iterations; goal under 5 minutes, with the effective
  sample size per second of the slowest-mixing parameter and posterior N near 50.
- Coverage: the same design, several simulated studies (``ROSETTE_BENCH_PID_STUDIES``, default 4; the goal asks
  for 50 or more), each fitted with 3 chains of ``ROSETTE_BENCH_PID_ITERATIONS`` (default 6,000): the share of 95%
  credible intervals of N that hold the truth (goal 0.90-0.98 over 50 studies), and the mean width of N's interval
  over a left-only fit's on the same data (goal < 1: using both flanks narrows it).
"""

from __future__ import annotations

import os
import time

import numpy as np

from core.field.partial_id import (
    FlankStation,
    StateSpace,
    fit_partial_id,
    flank_data,
    grid_stations,
    left_only,
    simulate_flanks,
)

N_TRUE, P0, P0_BOTH, SIGMA_M, OCCASIONS, SPACING_M, BUFFER_M = 50, 0.13, 0.2, 500.0, 10, 1000.0, 2000.0


def _design() -> tuple[list[FlankStation], StateSpace]:
    stations = grid_stations(6, 6, spacing_m=SPACING_M, n_occasions=OCCASIONS)
    xy = np.array([[s.x, s.y] for s in stations])
    return stations, StateSpace.around(xy, buffer_m=BUFFER_M)


def _study(rng: np.random.Generator):
    stations, space = _design()
    study = simulate_flanks(stations, n_animals=N_TRUE, p0_single=P0, p0_both=P0_BOTH, sigma_m=SIGMA_M,
                            space=space, rng=rng)
    return flank_data(study.captures, study.stations), space


def _speed_rows() -> list[dict]:
    data, space = _study(np.random.default_rng(2018))
    t0 = time.perf_counter()
    fit = fit_partial_id(data, space, chains=3, iterations=20_000, seed=1)
    seconds = time.perf_counter() - t0
    slowest = min(fit.ess, key=lambda k: fit.ess[k])
    note = (f"{data.n_left} left and {data.n_right} right identities, M {fit.augmented}; R-hat max "
            f"{fit.rhat_max:.3f}; ESS {', '.join(f'{k} {v:.0f}' for k, v in fit.ess.items())}"
            + (f"; refused: {fit.refused}" if fit.refused else ""))
    return [{"benchmark": "partial identity 3 chains x 20,000 iterations (N 50, 36 stations, 10 occasions)",
             "value": seconds, "unit": "s", "goal": "< 300 s", "note": note},
            {"benchmark": "partial identity effective sample size per second (slowest parameter)",
             "value": fit.ess[slowest] / seconds, "unit": "ESS/s", "goal": "", "note": f"slowest: {slowest}"},
            {"benchmark": "partial identity, the paper's settings: posterior median of N (truth 50)",
             "value": fit.n.median, "unit": "animals", "goal": "near 50",
             "note": f"95% CrI {fit.n.lcl:.0f}-{fit.n.ucl:.0f}; linked pairs {fit.linked_pairs:.1f}; sigma "
                     f"{fit.sigma_m.median:.0f} m; p0 {fit.p0_single.median:.3f}"}]


def _coverage_rows() -> list[dict]:
    studies = int(os.environ.get("ROSETTE_BENCH_PID_STUDIES", "4"))
    iterations = int(os.environ.get("ROSETTE_BENCH_PID_ITERATIONS", "6000"))
    rng = np.random.default_rng(41)
    covered, ratios, medians, refused = [], [], [], 0
    t0 = time.perf_counter()
    for n in range(studies):
        data, space = _study(rng)
        fit = fit_partial_id(data, space, chains=3, iterations=iterations, seed=n)
        left = fit_partial_id(left_only(data), space, chains=3, iterations=iterations, seed=n)
        refused += fit.refused is not None
        covered.append(fit.n.lcl <= N_TRUE <= fit.n.ucl)
        ratios.append((fit.n.ucl - fit.n.lcl) / max(left.n.ucl - left.n.lcl, 1e-9))
        medians.append(fit.n.median)
    note = (f"{studies} studies (goal: 50 or more; ROSETTE_BENCH_PID_STUDIES), 3 x {iterations:,} iterations each, "
            f"{refused} refused by the diagnostics, mean posterior median N {np.mean(medians):.1f}; "
            f"{time.perf_counter() - t0:.0f} s")
    return [{"benchmark": "partial identity: 95% CrI coverage of N (one camera per station)",
             "value": float(np.mean(covered)), "unit": "", "goal": "0.90-0.98 over >= 50 studies", "note": note},
            {"benchmark": "partial identity: width of N's 95% CrI over a left-only fit's",
             "value": float(np.mean(ratios)), "unit": "", "goal": "< 1", "note": note}]


def run() -> list[dict]:
    return _speed_rows() + _coverage_rows()


if __name__ == "__main__":
    for row in run():
        print(row)
