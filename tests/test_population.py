"""Occasions, capture histories and closed-population estimates M0, Mt (Darroch) and Mh-Chao (issue 23, item 6;
docs/DESIGN.md section 8): hand-worked cases, published worked examples, brute-force likelihood grids, identities.

Published examples reproduced here (to the precision published):
- Cottontail rabbits of Edwards & Eberhardt (1967, J. Wildl. Manage. 31:87-96), as tabulated in Otis, Burnham, White
  & Anderson (1978, Wildl. Monogr. 62): t = 18 trap nights, M = 76, f = (43, 16, 8, 6, 0, 2, 1, 0, ..., 0). Model M0
  in program MARK gives N = 96.258770, p = 0.0819550 (the MARK figures as recorded beside the same data in the
  tests of the wiqid R package, mikemeredith/wiqid inst/tests/testthat/test-closedCap.R).
- Killarney birds in EstimateS (R. K. Colwell): S_obs = 31, f1 = 4, f2 = 4. EstimateS gives Chao1 = 33 with SD
  2.65 and log-normal CI (31.28, 45.36), and the bias-corrected Chao1 = 32.2 with SD 1.84 and CI (31.13, 41.36)
  (recorded, with the note that EstimateS truncates rather than rounds, in wiqid inst/tests/testthat/test-rich.R).
  Chao's bias-corrected estimator, variance and log-normal interval are the same formulas as Mh-Chao here.
Mt is checked by hand (Petersen's n1 n2 / m2 and its variance for t = 2, an exact root for t = 3), its likelihood
against a brute-force grid, and against MARK on the Kanha tigers in tests/test_population_edges.py.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta, timezone

import numpy as np
import pytest

from core.field.population import (
    CHI2_1_95,
    CaptureHistories,
    capture_frequencies,
    capture_histories,
    darroch_root,
    discovery_curve,
    estimate_all,
    estimate_m0,
    estimate_mh_chao,
    estimate_mt,
    m0_from_counts,
    mh_chao_from_frequencies,
    mt_from_counts,
    occasion_index,
)

RABBIT_F = [43, 16, 8, 6, 0, 2, 1] + [0] * 11  # f_1..f_18, Edwards & Eberhardt (1967) via Otis et al. (1978)

# 7 animals x 3 occasions: n_j = (4, 4, 4), f = (4, 1, 2), M = 7, n. = 12
HAND = np.array(
    [
        [1, 1, 1],
        [1, 1, 1],
        [1, 1, 0],
        [1, 0, 0],
        [0, 1, 0],
        [0, 0, 1],
        [0, 0, 1],
    ]
)


def _matrix_from_frequencies(f: list[int]) -> np.ndarray:
    """A history matrix with f_k animals caught on k occasions (occasions 0..k-1); M0 and Mh need only f."""
    t = len(f)
    rows = [[1] * k + [0] * (t - k) for k, fk in enumerate(f, start=1) for _ in range(fk)]
    return np.array(rows, dtype=np.uint8)


# --------------------------------------------------------------------------- independent brute-force likelihoods


def _m0_ll_brute(N: int, M: int, n: int, t: int) -> float:
    # ln[N!/(N-M)!] + n ln p + (tN - n) ln(1 - p), p = n/(tN) (the MLE of p given N), written out from scratch
    p = n / (t * N)
    ll = math.lgamma(N + 1) - math.lgamma(N - M + 1) + n * math.log(p)
    if t * N > n:
        ll += (t * N - n) * math.log(1 - p)
    return ll


def _mt_ll_brute(N: int, M: int, nj: list[int]) -> float:
    # ln[N!/(N-M)!] + sum_j [n_j ln p_j + (N - n_j) ln(1 - p_j)], p_j = n_j/N (the MLE of p_j given N)
    ll = math.lgamma(N + 1) - math.lgamma(N - M + 1)
    for n in nj:
        p = n / N
        ll += n * math.log(p) if n else 0.0
        ll += (N - n) * math.log(1 - p) if N > n else 0.0
    return ll


def _grid_fit(ll, M: int, n_max: int) -> tuple[int, int, int]:
    values = [(N, ll(N)) for N in range(M, n_max + 1)]
    best_n, best = max(values, key=lambda v: v[1])
    inside = [N for N, v in values if 2 * (best - v) <= CHI2_1_95]
    assert inside[-1] < n_max, "grid too short"
    return best_n, inside[0], inside[-1]


# --------------------------------------------------------------------------- occasions and histories


def test_occasion_index_hand_worked():
    # N = 3 days: [0, 3) -> 0, [3, 6) -> 1, [6, 9) -> 2
    assert occasion_index([0, 2.9, 3, 5.99, 6], 3).tolist() == [0, 0, 1, 1, 2]
    assert occasion_index([0.5, 1.0, 1.49], 0.5).tolist() == [1, 2, 2]
    with pytest.raises(ValueError, match="before the start"):
        occasion_index([1, -0.5], 2)
    with pytest.raises(ValueError, match="positive"):
        occasion_index([1], 0)


def _study():
    """Start 1 March 00:00 local, 2-day occasions: occ 0 = 1-2 Mar, occ 1 = 3-4 Mar, occ 2 = 5-6, occ 3 = 7-8.

    A: 1 Mar 10:00 (day 0.42, occ 0), 2 Mar 23:59 (day 1.9993, occ 0 again), 7 Mar 12:00 (day 6.5, occ 3)
    C: 3 Mar 06:00 (day 2.25, occ 1); B: 3 Mar 08:00 (day 2.33, occ 1) -> order of first detection A, C, B.
    Deployments: d1 active 1 Mar 00:00 - 4 Mar 00:00 (days 0-3), d2 2 Mar 12:00 - 3 Mar 12:00 (days 1.5-2.5).
    Effort: occ 0 [0,2): d1 2 + d2 0.5 = 2.5; occ 1 [2,4): d1 1 + d2 0.5 = 1.5; occ 2: 0; occ 3: 0.
    A on 7 Mar is outside every deployment: counted, and listed in outside_effort."""
    t0 = datetime(2024, 3, 1)
    dets = [
        ("A", datetime(2024, 3, 1, 10)),
        ("B", datetime(2024, 3, 3, 8)),
        ("A", datetime(2024, 3, 2, 23, 59)),
        ("C", datetime(2024, 3, 3, 6)),
        ("A", datetime(2024, 3, 7, 12)),
    ]
    effort = [(t0, datetime(2024, 3, 4)), (datetime(2024, 3, 2, 12), datetime(2024, 3, 3, 12))]
    return t0, dets, effort


def test_capture_histories_from_local_datetimes_hand_worked():
    t0, dets, effort = _study()
    h = capture_histories(dets, start=t0, occasion_days=2, effort=effort)
    assert h.individuals == ("A", "C", "B")
    assert h.matrix.tolist() == [[1, 0, 0, 1], [0, 1, 0, 0], [0, 1, 0, 0]]
    assert h.capture_counts() == {"A": 2, "C": 1, "B": 1}  # A's two detections in occasion 0 count once
    assert h.occasion_bounds[1] == (datetime(2024, 3, 3), datetime(2024, 3, 5))
    assert h.effort.tolist() == pytest.approx([2.5, 1.5, 0.0, 0.0])
    assert h.outside_effort == (("A", datetime(2024, 3, 7, 12)),)
    # occasion 2 has neither effort nor a detection: left out of what the estimates see; occasion 3 has A
    s = h.surveyed()
    assert s.matrix.tolist() == [[1, 0, 1], [0, 1, 0], [0, 1, 0]]
    assert s.occasion_bounds[2] == (datetime(2024, 3, 7), datetime(2024, 3, 9))
    assert capture_frequencies(h) == {1: 2, 2: 1, 3: 0}
    assert discovery_curve(h) == [1, 3, 3]
    # without effort every occasion counts
    h2 = capture_histories(dets, start=t0, occasion_days=2)
    assert h2.effort is None and h2.outside_effort == () and h2.surveyed() is h2
    assert discovery_curve(h2) == [1, 3, 3, 3]
    assert capture_frequencies(h2) == {1: 2, 2: 1, 3: 0, 4: 0}


def test_day_offsets_and_dates_give_the_same_histories():
    t0, dets, effort = _study()
    h = capture_histories(dets, start=t0, occasion_days=2, effort=effort)
    day = {d: (d - t0) / timedelta(days=1) for _, d in dets}
    h_days = capture_histories(
        [(i, day[d]) for i, d in dets], start=0.0, occasion_days=2, effort=[(0, 3), (1.5, 2.5)]
    )
    assert h_days.individuals == h.individuals
    assert np.array_equal(h_days.matrix, h.matrix)
    assert h_days.effort.tolist() == pytest.approx(h.effort.tolist())
    assert h_days.occasion_bounds[1] == (2.0, 4.0)
    h_date = capture_histories(dets, start=date(2024, 3, 1), occasion_days=2)  # a date is its local midnight
    assert np.array_equal(h_date.matrix, capture_histories(dets, start=t0, occasion_days=2).matrix)
    # a day number axis need not start at 0
    h_shift = capture_histories([("x", 10.2), ("y", 13.0)], start=10, occasion_days=3)
    assert h_shift.matrix.tolist() == [[1, 0], [0, 1]] and h_shift.occasion_bounds[0] == (10.0, 13.0)


def test_end_fixes_the_occasions_and_bad_times_are_refused():
    t0, dets, _ = _study()
    h = capture_histories(dets, start=t0, occasion_days=2, end=datetime(2024, 3, 11))  # 10 days -> 5 occasions
    assert h.n_occasions == 5 and discovery_curve(h) == [1, 3, 3, 3, 3]
    h = capture_histories(dets, start=t0, occasion_days=3, end=datetime(2024, 3, 11))  # ceil(10/3) = 4
    assert h.n_occasions == 4
    with pytest.raises(ValueError, match="at or after the end"):
        capture_histories(dets, start=t0, occasion_days=2, end=datetime(2024, 3, 7, 12))
    with pytest.raises(ValueError, match="before the start"):
        capture_histories(dets, start=datetime(2024, 3, 2), occasion_days=2)
    with pytest.raises(ValueError, match="time zone"):
        capture_histories([("A", datetime(2024, 3, 1, 10, tzinfo=timezone.utc))], start=t0, occasion_days=1)
    with pytest.raises(TypeError, match="not a day number"):
        capture_histories([("A", datetime(2024, 3, 1, 10))], start=0, occasion_days=1)
    with pytest.raises(TypeError, match="not a date"):
        capture_histories([("A", 1.5)], start=t0, occasion_days=1)
    with pytest.raises(ValueError, match="ends before it begins"):
        capture_histories([("A", 1.5)], start=0, occasion_days=1, effort=[(3, 2)])
    with pytest.raises(ValueError, match="positive"):
        capture_histories([("A", 1.5)], start=0, occasion_days=0)
    empty = capture_histories([], start=0, occasion_days=1)
    assert empty.matrix.shape == (0, 0) and discovery_curve(empty) == [] and capture_frequencies(empty) == {}


def test_frequencies_and_discovery_hand_worked():
    # HAND: row totals 3, 3, 2, 1, 1, 1, 1 -> f1 = 4, f2 = 1, f3 = 2
    assert capture_frequencies(HAND) == {1: 4, 2: 1, 3: 2}
    # occasion 0 sees rows 0-3 (4); occasion 1 adds row 4 (5); occasion 2 adds rows 5, 6 (7)
    assert discovery_curve(HAND) == [4, 5, 7]
    # a row with no detection is not an individual detected
    assert capture_frequencies(np.vstack([HAND, [0, 0, 0]])) == {1: 4, 2: 1, 3: 2}


# --------------------------------------------------------------------------- M0


def test_m0_hand_worked():
    """M = 7, n. = 12, t = 3. l(N) = ln N!/(N-7)! + 12 ln 12 + (3N-12) ln(3N-12) - 3N ln 3N:
    l(7) = ln 5040 + 12 ln 12 + 9 ln 9 - 21 ln 21 = 8.52516 + 29.81888 + 19.77502 - 63.93497 = -5.81591
    l(8) = ln 40320 + 12 ln 12 + 12 ln 12 - 24 ln 24 = 10.60460 + 29.81888 + 29.81888 - 76.27329 = -6.03093
    so l falls from N = M: N = 7, p = 12/21 = 0.5714."""
    e = estimate_m0(HAND)
    assert e.model == "M0" and e.N == 7 and e.ci_low == 7
    assert e.details["loglik"] == pytest.approx(-5.81591, abs=1e-5)
    assert e.details["p_hat"] == pytest.approx(12 / 21)
    best, lo, hi = _grid_fit(lambda N: _m0_ll_brute(N, 7, 12, 3), 7, 200)
    assert (best, lo, hi) == (e.N, e.ci_low, e.ci_high) == (7, 7, 12)


def test_m0_rabbits_reproduces_mark():
    """Edwards & Eberhardt cottontails: M = 76, n. = 43 + 2*16 + 3*8 + 4*6 + 6*2 + 7*1 = 142, t = 18.
    MARK: N = 96.258770, p = 0.0819550 (real-valued N); integer N = 96, p = 142/(18*96) = 0.08218."""
    x = _matrix_from_frequencies(RABBIT_F)
    e = estimate_m0(x)
    assert e.details["M"] == 76 and e.details["captures"] == 142 and e.details["occasions"] == 18
    assert round(e.details["N_continuous"], 6) == pytest.approx(96.258770, abs=2e-6)
    assert round(142 / (18 * e.details["N_continuous"]), 7) == pytest.approx(0.0819550, abs=1e-7)
    assert e.N == 96 and e.details["p_hat"] == pytest.approx(142 / (18 * 96))
    # profile-likelihood interval, checked against a brute-force grid of the likelihood over N = 76..1000
    best, lo, hi = _grid_fit(lambda N: _m0_ll_brute(N, 76, 142, 18), 76, 1000)
    assert (e.N, e.ci_low, e.ci_high) == (best, lo, hi) == (96, 86, 112)
    assert e == m0_from_counts(individuals=76, captures=142, occasions=18)


def test_m0_without_recaptures_is_unbounded():
    # n. = M: l(N) rises towards M ln(M/(t e)) as N -> infinity
    e = m0_from_counts(individuals=15, captures=15, occasions=3)
    assert math.isinf(e.N) and math.isinf(e.ci_high) and e.ci_low >= 15
    sup = 15 * math.log(15 / (3 * math.e))
    assert 2 * (sup - _m0_ll_brute(int(e.ci_low), 15, 15, 3)) <= CHI2_1_95
    assert 2 * (sup - _m0_ll_brute(int(e.ci_low) - 1, 15, 15, 3)) > CHI2_1_95
    assert e.to_dict()["N"] is None and e.to_dict()["ci_high"] is None
    with pytest.raises(ValueError, match="inconsistent"):
        m0_from_counts(individuals=5, captures=4, occasions=3)


# --------------------------------------------------------------------------- Mt (Darroch)


def test_mt_two_occasions_is_petersen():
    """t = 2, n1 = 40, n2 = 30, m2 = 10 recaptures, M = 40 + 30 - 10 = 60. Petersen: N = 40*30/10 = 120, and
    Darroch's equation holds there: (1 - 40/120)(1 - 30/120) = (2/3)(3/4) = 1/2 = 1 - 60/120."""
    e = mt_from_counts([40, 30], individuals=60)
    assert e.model == "Mt" and e.N == pytest.approx(120, abs=1e-9)
    assert e.details["p_hat"] == pytest.approx([1 / 3, 1 / 4])
    # the binomial profile likelihood (p_j profiled out) peaks a little lower, at 117
    best, lo, hi = _grid_fit(lambda N: _mt_ll_brute(N, 60, [40, 30]), 60, 2000)
    assert e.details["N_profile"] == best == 117
    # Darroch's variance is Petersen's n1 n2 (n1 - m2)(n2 - m2) / m2^3 = 40*30*30*20/1000 = 720 (Seber 1982, 3.1.1)
    assert e.details["variance"] == pytest.approx(720, rel=1e-9)
    C = math.exp(1.959964 * math.sqrt(math.log(1 + 720 / 60**2)))
    assert (e.ci_low, e.ci_high) == pytest.approx((60 + 60 / C, 60 + 60 * C), rel=1e-6)
    assert e.ci_low <= e.N <= e.ci_high


def test_mt_hand_worked_three_occasions():
    """HAND: n_j = (4, 4, 4), M = 7. At N = 8: (1 - 4/8)^3 = 1/8 = 1 - 7/8, so Darroch's N = 8, p_j = 1/2."""
    e = estimate_mt(HAND)
    assert e.N == pytest.approx(8, abs=1e-9) and e.details["p_hat"] == pytest.approx([0.5] * 3)
    best, lo, hi = _grid_fit(lambda N: _mt_ll_brute(N, 7, [4, 4, 4]), 7, 500)
    assert e.details["N_profile"] == best
    # Darroch's variance at N = 8: [1/(8-7) + 2/8 - 3/(8-4)]^-1 = [1 + 0.25 - 0.75]^-1 = 2
    assert e.details["variance"] == pytest.approx(2)
    assert e.ci_low <= e.N <= e.ci_high


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mt_matches_brute_force_grid(seed):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.1, 0.5, size=6)  # occasion-varying p, 80 animals
    x = (rng.uniform(size=(80, 6)) < p).astype(int)
    x = x[x.sum(axis=1) > 0]
    nj = x.sum(axis=0).tolist()
    M = x.shape[0]
    e = estimate_mt(x)
    root = e.N
    assert np.prod([1 - n / root for n in nj]) == pytest.approx(1 - M / root, rel=1e-9)
    assert darroch_root(nj, M) == root
    best, lo, hi = _grid_fit(lambda N: _mt_ll_brute(N, M, nj), M, 3000)
    assert e.details["N_profile"] == best
    assert e.ci_low <= root <= e.ci_high and abs(root - best) < 0.05 * root


def test_mt_edge_cases():
    # an occasion that caught everyone: N = M
    assert darroch_root([5, 2, 1], 5) == 5
    # no recaptures: unbounded; l(N) -> sum_j n_j ln n_j - M as N -> infinity, and the lower end is where
    # 2 (sup - l(N)) first falls to chi2_1(0.95)
    e = mt_from_counts([5, 5, 5], individuals=15)
    assert math.isinf(e.N) and math.isinf(e.ci_high)
    sup, lo = 3 * 5 * math.log(5) - 15, int(e.ci_low)
    assert 2 * (sup - _mt_ll_brute(lo, 15, [5] * 3)) <= CHI2_1_95 < 2 * (sup - _mt_ll_brute(lo - 1, 15, [5] * 3))
    with pytest.raises(ValueError, match="inconsistent"):
        mt_from_counts([6, 1], individuals=5)


# --------------------------------------------------------------------------- Mh-Chao


def test_mh_chao_hand_worked():
    """HAND: M = 7, f1 = 4, f2 = 1. f0 = 4*3/(2*2) = 3, N = 10.
    var = 4*3/(2*2) + 4*(2*4-1)^2/(4*2^2) + 4^2*1*(4-1)^2/(4*2^4) = 3 + 12.25 + 2.25 = 17.5
    C = exp(1.96 sqrt(ln(1 + 17.5/9))) = exp(1.96 * sqrt(1.079920)) = exp(2.036771) = 7.66588
    CI = [7 + 3/7.66588, 7 + 3*7.66588] = [7.39134, 29.99763]."""
    e = estimate_mh_chao(HAND)
    assert e.model == "Mh-Chao" and e.N == pytest.approx(10.0)
    assert e.details["variance"] == pytest.approx(17.5)
    assert e.details["C"] == pytest.approx(7.66588, abs=1e-5)
    assert (e.ci_low, e.ci_high) == (pytest.approx(7.39134, abs=1e-5), pytest.approx(29.99763, abs=1e-5))
    assert e.details["N_uncorrected"] == pytest.approx(7 + 16 / 2)  # Chao 1987's M + f1^2/(2 f2) = 15


def test_mh_chao_reproduces_estimates_killarney_birds():
    """EstimateS, Killarney birds (S_obs = 31, f1 = 4, f2 = 4).
    Bias-corrected: f0 = 4*3/(2*5) = 1.2, N = 32.2; var = 1.2 + 4*49/(4*25) + 16*4*9/(4*625) = 1.2 + 1.96 + 0.2304
    = 3.3904, SD = 1.8413; C = exp(1.96 sqrt(ln(1 + 3.3904/1.44))) = 8.6384; CI = [31 + 1.2/C, 31 + 1.2 C]
    = [31.1389, 41.3661]. EstimateS: 32.2, SD 1.84, CI 31.13 - 41.36 (its figures truncated to 2 decimals)."""
    f = {1: 4, 2: 4, 3: 23}  # any split of the remaining 23 animals among k >= 3 gives the same answer
    e = mh_chao_from_frequencies(f)
    assert round(e.N, 2) == 32.2
    assert round(e.details["se"], 2) == 1.84
    assert math.floor(e.ci_low * 100) / 100 == 31.13 and math.floor(e.ci_high * 100) / 100 == 41.36
    assert e.details["variance"] == pytest.approx(3.3904)
    # Chao's (1987) original estimator and variance with the same log-normal interval: EstimateS Chao1 = 33,
    # SD 2.65, CI 31.28 - 45.36. var = f2 [a^4/4 + a^3 + a^2/2], a = f1/f2 = 1 -> 4 * 1.75 = 7; f0 = 2.
    assert e.details["N_uncorrected"] == 33
    var0, f0 = 4 * (0.25 + 1 + 0.5), 2.0
    C0 = math.exp(1.96 * math.sqrt(math.log(1 + var0 / f0**2)))
    assert round(math.sqrt(var0), 2) == 2.65
    assert (round(31 + f0 / C0, 2), round(31 + f0 * C0, 2)) == (31.28, 45.36)


def test_mh_chao_rabbits_hand_worked():
    """Cottontails: M = 76, f1 = 43, f2 = 16. f0 = 43*42/(2*17) = 1806/34 = 53.1176, N = 129.1176
    (Chao 1987's uncorrected 76 + 43^2/32 = 133.78; the enclosure held 135 rabbits)."""
    e = estimate_mh_chao(_matrix_from_frequencies(RABBIT_F))
    assert e.N == pytest.approx(76 + 1806 / 34)
    assert e.details["N_uncorrected"] == pytest.approx(133.78125)
    # var = 1806/34 + 43*85^2/(4*17^2) + 43^2*16*42^2/(4*17^4) = 53.1176 + 268.7500 + 156.2068 = 478.0744
    assert e.details["variance"] == pytest.approx(478.0744, abs=1e-4)
    assert 76 < e.ci_low < e.N < e.ci_high


def test_mh_chao_without_enough_singletons_keeps_an_interval_above_M():
    """f0_hat = 0 (f1 <= 1): N = M, and the interval is the EstimateS User's Guide's for that case (Colwell,
    eqs. 12 and 14), worked by hand for f2 = 5, f3 = 1 over t = 10 occasions (M = 6):
    var = 5 (e^-2 - e^-4) + (e^-3 - e^-6) - (2*5 e^-2 + 3 e^-3)^2 / 10
        = 0.585098 + 0.047308 - 1.502714^2 / 10 = 0.406592;
    P = (5 e^-2 + e^-3) / 6 = 0.121077; M / (1 - P) = 6.826538; 1.96 sqrt(var) / (1 - P) = 1.421925;
    upper end 8.248463, lower end M = 6. Chao's log-normal interval shrinks to [M, M] there, as if no animal
    could have been missed by ten occasions."""
    e = mh_chao_from_frequencies({2: 5, 3: 1}, occasions=10)
    assert (e.N, e.ci_low) == (6, 6)
    assert e.details["variance"] == pytest.approx(0.406592, abs=1e-6)
    assert e.details["P"] == pytest.approx(0.121077, abs=1e-6)
    assert e.ci_high == pytest.approx(8.248463, abs=1e-6)
    assert "EstimateS" in e.details["ci_method"] and "f0_hat = 0" in e.details["note"]
    # one singleton and three doubletons: f0_hat = 1*0/8 = 0 as well; var's second term, (sum_k k e^-k f_k)^2 / t,
    # shrinks as t grows, so of 30 occasions the interval is wider than of 3
    few, many = (mh_chao_from_frequencies({1: 1, 2: 3}, occasions=t) for t in (3, 30))
    assert few.N == many.N == 4 and few.ci_low == many.ci_low == 4 and 4 < few.ci_high < many.ci_high
    # EstimateS's lower end would be 43.0 here, above N = 40: the lower end stays M, so N stays inside
    wide = mh_chao_from_frequencies({1: 1, 2: 39}, occasions=50)
    assert wide.N == wide.ci_low == 40 and wide.ci_high == pytest.approx(50.116304, abs=1e-6)
    # a single animal caught once: no recapture, no upper bound (EstimateS leaves it undefined)
    lone = mh_chao_from_frequencies({1: 1}, occasions=5)
    assert (lone.N, lone.ci_low, lone.ci_high) == (1, 1, math.inf) and "no upper bound" in lone.details["note"]
    assert mh_chao_from_frequencies([2, 0]).N == pytest.approx(2 + 2 * 1 / 2)  # f2 = 0 is fine: 2 + 1 = 3


# --------------------------------------------------------------------------- identities


@pytest.mark.parametrize("M,t", [(1, 2), (5, 2), (12, 4), (40, 10)])
def test_everyone_caught_every_time_gives_n_equals_m(M, t):
    m0, mt, chao = estimate_all(np.ones((M, t), dtype=int))
    for e in (m0, mt):
        assert (e.N, e.ci_low, e.ci_high) == (M, M, M), e
    # Mh-Chao's interval without singletons leaves room for e^-t of the animals seen t times: M (e^-t - e^-2t)
    # - (t e^-t M)^2 / t, less than an animal above M
    P = math.exp(-t)
    var = max(M * (P - P * P) - (t * P * M) ** 2 / t, 0.0)
    assert (chao.N, chao.ci_low) == (M, M) and M < chao.ci_high < M + 1
    assert chao.ci_high == pytest.approx(M / (1 - P) + 1.959964 * math.sqrt(var) / (1 - P), abs=1e-5)


@pytest.mark.parametrize("seed", [3, 4, 5, 6])
def test_invariant_to_order_and_never_below_m(seed):
    rng = np.random.default_rng(seed)
    p = rng.beta(1.5, 6, size=(60, 1))  # heterogeneous animals
    x = (rng.uniform(size=(60, 7)) < p).astype(int)
    x = x[x.sum(axis=1) > 0]
    M = x.shape[0]
    base = estimate_all(x)
    shuffled = x[rng.permutation(M)][:, rng.permutation(x.shape[1])]
    for a, b in zip(base, estimate_all(shuffled)):
        assert a.model == b.model
        assert (a.N, a.ci_low, a.ci_high) == pytest.approx((b.N, b.ci_low, b.ci_high), rel=1e-12)
    for e in base:
        assert e.N >= M and e.ci_low >= M and e.ci_low <= e.N <= e.ci_high, e
        assert e.assumption.endswith(".") and e.assumption.count(". ") == 0  # one sentence


def test_capture_histories_feed_the_estimates():
    t0, dets, effort = _study()
    h = capture_histories(dets, start=t0, occasion_days=2, effort=effort)
    assert isinstance(h, CaptureHistories)
    ests = estimate_all(h)  # the empty, unsurveyed occasion 2 is left out: t = 3
    assert [e.model for e in ests] == ["M0", "Mt", "Mh-Chao"]
    assert ests[0].details["occasions"] == 3 and ests[1].details["per_occasion"] == [1, 2, 1]
    # f1 = 2, f2 = 1: N = 3 + 2*1/(2*2) = 3.5
    assert ests[2].N == pytest.approx(3.5)
    assert ests[2].to_dict() == {
        "model": "Mh-Chao",
        "N": pytest.approx(3.5),
        "ci_low": pytest.approx(ests[2].ci_low),
        "ci_high": pytest.approx(ests[2].ci_high),
        "assumption": ests[2].assumption,
    }


def test_nobody_detected():
    x = np.zeros((0, 4), dtype=int)
    for e in estimate_all(x):  # no numbers at all, Mh-Chao's 0 included
        assert math.isnan(e.N) and math.isnan(e.ci_low) and math.isnan(e.ci_high)
        assert e.to_dict()["N"] is None and e.details["note"].startswith("No individual was detected")
