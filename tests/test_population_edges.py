"""Population estimates at the edges of what the data can say: Mt's N inside its own interval, no numbers from a
single occasion or from no individuals, one rule for camera-days in the Deployments and Population tabs, a capthist
README that names only the files written, and a full disk that names the file being written.

Published figures reproduced here:
- Kanha tigers (Karanth, Nichols, Kumar, Link & Hines 2004, PNAS 101:4854-4858): M = 26 tigers on t = 10 camera
  occasions. Program MARK's model Mt gives N = 28.051 with the log-normal 95% interval (26.413, 36.180) and
  p_j = (0.1782, 0.1782, 0.1069, 0.4634, 0.2495, 0.1426, 0.1426, 0.1426, 0.1782, 0.2852) (as recorded beside the same
  data in the tests of the wiqid R package, mikemeredith/wiqid inst/tests/testthat/test-closedCap2.R). At MARK's N
  these p_j are n_j / N for n_j = (5, 5, 3, 13, 7, 4, 4, 4, 5, 8), the animals caught on each occasion.
  MARK's N is the real maximiser of Otis et al.'s (1978) Mt likelihood and its interval is Chao's (1987) log-normal
  interval on f0 = N - M, C = exp(1.96 sqrt(ln(1 + var/f0^2))), var from the likelihood's curvature (MARK's manual,
  Cooch & White, "Program MARK: a gentle introduction", chapter 14, closed captures). Rosette reports Darroch's N
  (Otis et al. 1978, as program CAPTURE does) with Darroch's variance in the same log-normal interval.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import polygamma

from core.population import (
    NO_INDIVIDUALS,
    ONE_OCCASION,
    darroch_root,
    estimate_all,
    lognormal_interval,
    mh_chao_from_frequencies,
    mt_from_counts,
)

KANHA_NJ = [5, 5, 3, 13, 7, 4, 4, 4, 5, 8]
KANHA_M = 26


# --------------------------------------------------------------------------- Mt: N inside its interval


def test_mt_reproduces_mark_on_the_kanha_tigers():
    e = mt_from_counts(KANHA_NJ, individuals=KANHA_M)
    # MARK's N, the real maximiser of the Mt likelihood, and its p_j
    assert round(e.details["N_mle"], 3) == 28.051
    assert [round(n / e.details["N_mle"], 4) for n in KANHA_NJ] == [
        0.1782, 0.1782, 0.1069, 0.4634, 0.2495, 0.1426, 0.1426, 0.1426, 0.1782, 0.2852]
    # MARK's interval: the log-normal interval with the variance from the likelihood's curvature at its N,
    # -1/l''(N), l'' = psi'(N+1) - psi'(N-M+1) + sum_j [1/(N - n_j) - 1/N]
    n_mle = e.details["N_mle"]
    curvature = (polygamma(1, n_mle + 1) - polygamma(1, n_mle - KANHA_M + 1)
                 + sum(1 / (n_mle - n) - 1 / n_mle for n in KANHA_NJ))
    lo, hi, _ = lognormal_interval(KANHA_M, n_mle - KANHA_M, -1 / curvature)
    assert (round(lo, 3), round(hi, 2)) == (26.413, 36.18)  # MARK: 26.413, 36.180
    # Rosette's N is Darroch's root, a little above MARK's, and its interval (Darroch's variance) holds it
    assert e.N == pytest.approx(darroch_root(KANHA_NJ, KANHA_M))
    assert np.prod([1 - n / e.N for n in KANHA_NJ]) == pytest.approx(1 - KANHA_M / e.N, rel=1e-12)
    assert 28.7 < e.N < 28.9
    var = 1 / (1 / (e.N - 26) + 9 / e.N - sum(1 / (e.N - n) for n in KANHA_NJ))
    assert e.details["variance"] == pytest.approx(var, rel=1e-12)
    C = math.exp(1.959963984540054 * math.sqrt(math.log(1 + var / (e.N - 26) ** 2)))
    assert (e.ci_low, e.ci_high) == pytest.approx((26 + (e.N - 26) / C, 26 + (e.N - 26) * C), rel=1e-12)
    assert KANHA_M < e.ci_low < e.N < e.ci_high


def test_mt_n_just_above_m_lies_inside_its_interval():
    """8 animals on 4 occasions, nearly all recaptured: Darroch's N = 8.08, which the likelihood's integer interval
    (8 to 8: every N >= 9 is more than 3.84/2 below the peak at N = 8) left outside."""
    e = mt_from_counts([4, 5, 5, 7], individuals=8)
    assert e.N == pytest.approx(darroch_root([4, 5, 5, 7], 8)) and round(e.N, 2) == 8.08
    assert e.details["N_profile"] == 8  # the integer likelihood peak is M itself ...
    assert 8 < e.ci_low < e.N < e.ci_high  # ... but the interval is built around N, and holds it


def test_mt_every_animal_caught_on_every_occasion_is_exactly_m():
    e = mt_from_counts([8, 8, 8], individuals=8)
    assert (e.N, e.ci_low, e.ci_high) == (8, 8, 8) and e.details["variance"] == 0


@pytest.mark.parametrize("M", [2, 3, 5, 8])
def test_mt_n_inside_its_interval_for_every_small_study(M):
    checked = 0
    for t in (2, 3, 4):
        for nj in itertools.product(range(1, M + 1), repeat=t):
            if sum(nj) <= M:  # no recapture: N unbounded
                continue
            e = mt_from_counts(list(nj), individuals=M)
            assert M <= e.ci_low <= e.N <= e.ci_high, (nj, e)
            checked += 1
    assert checked > 0


# --------------------------------------------------------------------------- one occasion, no individuals


def test_one_occasion_gives_no_number_and_says_why_in_one_sentence():
    one = np.ones((48, 1), dtype=int)  # 48 animals, each seen on the only occasion
    for e in estimate_all(one):
        assert math.isnan(e.N) and math.isnan(e.ci_low) and math.isnan(e.ci_high), e
        assert e.to_dict()["N"] is None
        assert e.details["note"] == ONE_OCCASION
    assert ONE_OCCASION.endswith(".") and ONE_OCCASION.count(". ") == 0
    # Chao's formula alone would have made 48 + 48*47/2 = 1,176 of them
    assert mh_chao_from_frequencies([48]).N == pytest.approx(48 + 48 * 47 / 2)
    assert math.isnan(mh_chao_from_frequencies([48], occasions=1).N)


def test_no_individuals_gives_no_numbers_at_all():
    for e in estimate_all(np.zeros((0, 5), dtype=int)):
        assert (e.to_dict()["N"], e.to_dict()["ci_low"], e.to_dict()["ci_high"]) == (None, None, None)
        assert e.details["note"] == NO_INDIVIDUALS
    assert math.isnan(mh_chao_from_frequencies({1: 0, 2: 0}).N)


def test_two_occasions_still_give_numbers():
    x = np.array([[1, 1], [1, 0], [0, 1], [1, 1], [1, 0]])
    m0, mt, mh = estimate_all(x)
    assert all(math.isfinite(e.N) for e in (m0, mt, mh))
    assert mt.N == pytest.approx(4 * 3 / 2)  # Petersen: n1 n2 / m2
