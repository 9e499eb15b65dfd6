"""Model comparison statistics: Wilcoxon per seed, Fisher across seeds, Holm, rank correlations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from core.identify.stats import (
    bootstrap_ci,
    compare_models,
    fisher_combine,
    holm,
    paired_wilcoxon,
    rank_correlation,
    verdict,
)


def _seeds(n_seeds: int = 3, n_queries: int = 40, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.random(n_queries) for _ in range(n_seeds)]


def test_identical_models_show_no_difference():
    a = _seeds()
    out = compare_models(a, [x.copy() for x in a])
    assert out["p_combined"] == 1.0
    assert all(s["p"] == 1.0 and s["mean_diff"] == 0.0 for s in out["per_seed"])
    assert out["direction"] == "none" and not out["consistent_direction"]
    json.dumps(out)


def test_clearly_better_model_has_small_p():
    a = _seeds()
    rng = np.random.default_rng(1)
    b = [x + 0.1 + 0.02 * rng.normal(size=x.size) for x in a]  # B wins on nearly every query
    out = compare_models(a, b)
    assert out["p_combined"] < 1e-6
    assert out["direction"] == "b" and out["consistent_direction"]
    assert out["mean_diff"] == pytest.approx(-0.1, abs=0.02)
    assert all(s["p"] < 1e-4 for s in out["per_seed"])


def test_noise_only_difference_is_not_significant():
    a = _seeds(n_seeds=2, seed=3)
    rng = np.random.default_rng(4)
    b = [x + 0.01 * rng.normal(size=x.size) for x in a]  # symmetric noise, no effect
    assert compare_models(a, b)["p_combined"] > 0.05


def test_wilcoxon_exact_hand_case():
    # differences 1..5 all positive: W- = 0; exact two-sided p = 2 * (1/2^5) = 1/16
    out = paired_wilcoxon(np.arange(1.0, 6.0), np.zeros(5))
    assert out["p"] == pytest.approx(1 / 16)
    assert out["n_a_better"] == 5 and out["n_b_better"] == 0 and out["mean_diff"] == 3.0


def test_wilcoxon_drops_nan_pairs_and_checks_lengths():
    out = paired_wilcoxon(np.array([1.0, np.nan, 3.0]), np.array([0.0, 1.0, np.nan]))
    assert out["n"] == 1
    with pytest.raises(ValueError):
        paired_wilcoxon(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError):
        compare_models([np.zeros(3)], [np.zeros(3), np.zeros(3)])


def test_fisher_combination_hand_formula():
    # chi2 with 4 dof: sf(x) = exp(-x/2) (1 + x/2); x = -2 ln(p1 p2) -> p1 p2 (1 - ln(p1 p2))
    p1, p2 = 0.04, 0.3
    expected = p1 * p2 * (1 - math.log(p1 * p2))
    assert fisher_combine([p1, p2]) == pytest.approx(expected)
    assert fisher_combine([0.2]) == pytest.approx(0.2)
    assert fisher_combine([0.2, float("nan")]) == pytest.approx(0.2)
    assert math.isnan(fisher_combine([]))


def test_holm_hand_case():
    # sorted p: 0.01, 0.03, 0.04 (m = 3) -> 3*0.01 = 0.03 ; 2*0.03 = 0.06 ; max(0.06, 1*0.04) = 0.06
    out = holm({"x": 0.01, "y": 0.04, "z": 0.03})
    assert out["x"]["p_holm"] == pytest.approx(0.03) and out["x"]["reject"]
    assert out["z"]["p_holm"] == pytest.approx(0.06) and not out["z"]["reject"]
    assert out["y"]["p_holm"] == pytest.approx(0.06) and not out["y"]["reject"]
    assert list(out) == ["x", "y", "z"]
    with_nan = holm({"x": 0.01, "w": float("nan")})
    assert with_nan["x"]["p_holm"] == pytest.approx(0.01) and with_nan["w"]["p_holm"] is None


@pytest.mark.parametrize("method", ["spearman", "kendall"])
def test_rank_correlation_ci_contains_estimate(method):
    rng = np.random.default_rng(0)
    x = rng.random(25)
    y = x + 0.3 * rng.normal(size=25)
    out = rank_correlation(x, y, method=method, n_boot=500)
    ref = sps.spearmanr(x, y) if method == "spearman" else sps.kendalltau(x, y)
    assert out["rho"] == pytest.approx(ref.statistic) and out["p"] == pytest.approx(ref.pvalue)
    assert out["ci_low"] <= out["rho"] <= out["ci_high"]
    assert out["ci_low"] > 0 and out["ci_high"] <= 1.0 and out["n"] == 25
    assert rank_correlation(x, y, method=method, n_boot=500) == out  # seeded


def test_rank_correlation_perfect_and_reversed():
    x = np.arange(10.0)
    up = rank_correlation(x, x**2, n_boot=200)
    assert up["rho"] == pytest.approx(1.0) and up["ci_low"] == pytest.approx(1.0)
    down = rank_correlation(x, -x, method="kendall", n_boot=200)
    assert down["rho"] == pytest.approx(-1.0) and down["ci_high"] == pytest.approx(-1.0)
    with pytest.raises(ValueError):
        rank_correlation([1, 2], [1, 2])
    with pytest.raises(ValueError):
        rank_correlation(x, x, method="pearson")


def test_bootstrap_ci_of_the_mean():
    rng = np.random.default_rng(3)
    v = rng.normal(0.05, 0.1, 400)
    lo, hi = bootstrap_ci(v, n_boot=1000)
    se = v.std(ddof=1) / np.sqrt(v.size)
    assert lo < v.mean() < hi
    assert hi - lo == pytest.approx(2 * 1.96 * se, rel=0.15)  # normal theory for a mean of 400 values
    assert bootstrap_ci(v, n_boot=1000) == (lo, hi)  # seeded
    assert bootstrap_ci([0.2, 0.2, 0.2]) == pytest.approx((0.2, 0.2))  # no spread, no interval


def test_verdict_words():
    text = verdict("cmc1", name_a="A", name_b="B", mean_diff=-0.041, p_holm=0.003)
    assert text == "B finds the right animal first more often: +4.1 points CMC@1, p = 0.003 after correction."
    weak = verdict("map", name_a="A", name_b="B", mean_diff=0.012, p_holm=0.4)
    assert weak.startswith("No reliable difference in mAP: A is ahead by 1.2 points")
    same = verdict("cmc1", name_a="A", name_b="B", mean_diff=0.0, p_holm=1.0)
    assert same == "No difference in CMC@1: A and B score the same on these queries (p = 1)."
    assert "not enough queries" in verdict("map", name_a="A", name_b="B", mean_diff=float("nan"), p_holm=None)
    # the rank test and the interval of the mean disagree: the verdict says so, and why
    mixed = verdict("map", name_a="A", name_b="B", mean_diff=0.014, p_holm=0.71, ci=(0.005, 0.024))
    assert mixed.startswith("No reliable difference in mAP: A is ahead by 1.4 points, but p = 0.71")
    assert mixed.endswith("The mean difference's 95% interval (+0.5 to +2.4 points) excludes 0: a few queries gain "
                          "or lose much while most move little, which the per-query rank test weighs less.")
    assert verdict("map", name_a="A", name_b="B", mean_diff=0.014, p_holm=0.71, ci=(-0.002, 0.03)) == \
        verdict("map", name_a="A", name_b="B", mean_diff=0.014, p_holm=0.71)  # the interval holds 0: nothing to add
    assert "excludes 0" not in verdict("cmc1", name_a="A", name_b="B", mean_diff=-0.041, p_holm=0.003,
                                       ci=(-0.07, -0.01))  # agreeing: one sentence
