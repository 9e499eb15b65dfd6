"""Statistics for comparing models on one benchmark (docs/DESIGN.md section 4, "Comparing two models").

- Per seed: paired Wilcoxon signed-rank test on per-query values (e.g. AP of each
  query) of model A vs model B, ``scipy.stats.wilcoxon`` (zero differences dropped,
  exact distribution for small samples). A seed where every difference is 0 has p = 1.
- Across seeds: Fisher's method, X = -2 * sum_s ln p_s ~ chi2(2S) under H0
  (``scipy.stats.combine_pvalues``). Fisher ignores direction: check ``direction``
  and ``consistent_direction`` before reading a small p as "A is better".
- Across endpoints: Holm step-down correction,
  p_holm(i) = max_{j <= i} min(1, (m - j + 1) p_(j)) for sorted p_(1) <= ... <= p_(m).
- Correlation of two axes: Spearman rho or Kendall tau-b with a seeded percentile
  bootstrap CI (resampling pairs with replacement).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests


def _paired(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal lengths, got {a.size} and {b.size}")
    keep = ~(np.isnan(a) | np.isnan(b))
    return a[keep], b[keep]


def paired_wilcoxon(a: np.ndarray, b: np.ndarray, *, alternative: str = "two-sided") -> dict:
    """Wilcoxon signed-rank test of per-query values a vs b (pairs with a NaN dropped).

    Returns n (pairs), mean_a, mean_b, mean_diff = mean(a - b), median_diff, n_a_better
    (a > b), n_b_better, statistic and p (1.0 when all differences are 0, NaN without pairs).
    """
    a, b = _paired(a, b)
    diff = a - b
    out = {
        "n": int(diff.size),
        "mean_a": float(a.mean()) if a.size else float("nan"),
        "mean_b": float(b.mean()) if b.size else float("nan"),
        "mean_diff": float(diff.mean()) if diff.size else float("nan"),
        "median_diff": float(np.median(diff)) if diff.size else float("nan"),
        "n_a_better": int(np.sum(diff > 0)),
        "n_b_better": int(np.sum(diff < 0)),
    }
    if diff.size == 0:
        out.update(statistic=float("nan"), p=float("nan"))
    elif not np.any(diff != 0):
        out.update(statistic=0.0, p=1.0)
    else:
        res = sps.wilcoxon(a, b, alternative=alternative)
        out.update(statistic=float(res.statistic), p=float(res.pvalue))
    return out


def fisher_combine(pvalues: Sequence[float]) -> float:
    """Fisher's combined p: chi2_{2S}.sf(-2 sum ln p_s); NaN entries ignored, NaN if none left."""
    ps = np.asarray([p for p in pvalues if not math.isnan(p)], dtype=np.float64)
    if ps.size == 0:
        return float("nan")
    if ps.size == 1:
        return float(ps[0])
    return float(sps.combine_pvalues(ps, method="fisher").pvalue)


def compare_models(
    per_query_a: Sequence[np.ndarray],
    per_query_b: Sequence[np.ndarray],
    *,
    alternative: str = "two-sided",
) -> dict:
    """Compare model A and B: one Wilcoxon test per seed on paired per-query values, Fisher across seeds.

    ``per_query_a[s][i]`` and ``per_query_b[s][i]`` are the same query of seed s (e.g. its AP).
    Returns n_seeds, per_seed (see :func:`paired_wilcoxon`), mean_diff (mean over seeds of
    mean(a - b)), direction ('a' if mean_diff > 0, 'b' if < 0, 'none'), consistent_direction
    (every seed's mean difference has that sign) and p_combined (Fisher).
    """
    if len(per_query_a) != len(per_query_b):
        raise ValueError(f"{len(per_query_a)} seeds for A but {len(per_query_b)} for B")
    if len(per_query_a) == 0:
        raise ValueError("no seeds to compare")
    per_seed = [paired_wilcoxon(a, b, alternative=alternative) for a, b in zip(per_query_a, per_query_b)]
    diffs = np.array([s["mean_diff"] for s in per_seed])
    diffs = diffs[~np.isnan(diffs)]
    mean_diff = float(diffs.mean()) if diffs.size else float("nan")
    direction = "a" if mean_diff > 0 else "b" if mean_diff < 0 else "none"
    sign = np.sign(mean_diff) if not math.isnan(mean_diff) else 0.0
    return {
        "n_seeds": len(per_seed),
        "per_seed": per_seed,
        "mean_diff": mean_diff,
        "direction": direction,
        "consistent_direction": bool(sign != 0 and np.all(np.sign(diffs) == sign)),
        "p_combined": fisher_combine([s["p"] for s in per_seed]),
    }


def holm(pvalues: Mapping[str, float], *, alpha: float = 0.05) -> dict[str, dict]:
    """Holm correction across endpoints: {name: {"p", "p_holm", "reject"}}.

    NaN p-values are left out of the family and reported with p_holm None, reject False.
    """
    names = [k for k, p in pvalues.items() if not math.isnan(float(p))]
    out: dict[str, dict] = {
        k: {"p": float(p), "p_holm": None, "reject": False} for k, p in pvalues.items() if k not in names
    }
    if names:
        reject, adjusted, _, _ = multipletests([float(pvalues[k]) for k in names], alpha=alpha, method="holm")
        for k, r, adj in zip(names, reject, adjusted):
            out[k] = {"p": float(pvalues[k]), "p_holm": float(adj), "reject": bool(r)}
    return {k: out[k] for k in pvalues}


def bootstrap_ci(values: Sequence[float] | np.ndarray, *, statistic=np.mean, n_boot: int = 2000, seed: int = 0,
                 confidence: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of ``statistic`` over ``values`` (``scipy.stats.bootstrap``, seeded)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if v.size < 2 or np.all(v == v[0]):
        x = float(statistic(v)) if v.size else float("nan")
        return x, x
    res = sps.bootstrap((v,), statistic, n_resamples=n_boot, confidence_level=confidence, method="percentile",
                        random_state=np.random.default_rng(seed), vectorized=True)
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def rank_correlation(
    x: Sequence[float],
    y: Sequence[float],
    *,
    method: str = "spearman",
    n_boot: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """Spearman rho or Kendall tau-b of paired values with a seeded percentile bootstrap CI.

    rho and p from scipy (``spearmanr`` / ``kendalltau``); the CI from ``scipy.stats.bootstrap`` with
    ``paired=True`` (pairs resampled together), percentile method. Pairs with a NaN are dropped.
    Returns {rho, ci_low, ci_high, p, n, method}.
    """
    if method not in ("spearman", "kendall"):
        raise ValueError(f"method must be 'spearman' or 'kendall', got {method!r}")
    xa, ya = _paired(np.asarray(x), np.asarray(y))
    n = xa.size
    if n < 3:
        raise ValueError(f"rank correlation needs at least 3 pairs, got {n}")
    fn = sps.spearmanr if method == "spearman" else sps.kendalltau
    res = fn(xa, ya)
    rho, p = float(res.statistic), float(res.pvalue)

    def stat(a: np.ndarray, b: np.ndarray) -> float:
        return float(fn(a, b).statistic)

    with np.errstate(invalid="ignore", divide="ignore"):
        boot = sps.bootstrap((xa, ya), stat, paired=True, vectorized=False, n_resamples=n_boot,
                             confidence_level=confidence, method="percentile",
                             random_state=np.random.default_rng(seed))
    lo, hi = float(boot.confidence_interval.low), float(boot.confidence_interval.high)
    return {"rho": rho, "ci_low": lo, "ci_high": hi, "p": p, "n": int(n), "method": method}


ENDPOINT_WORDS = {
    "map": ("ranks the right animal higher overall", "mAP", "points"),
    "cmc1": ("finds the right animal first more often", "CMC@1", "points"),
    "cmc5": ("has the right animal in its top 5 more often", "CMC@5", "points"),
}


def verdict(endpoint: str, *, name_a: str, name_b: str, mean_diff: float, p_holm: float | None,
            alpha: float = 0.05, ci: tuple[float, float] | None = None) -> str:
    """One sentence a curator can read: who is better on ``endpoint`` (difference A - B, in points), and
    whether that holds after the correction, e.g. "B finds the right animal first more often: +4.1 points
    CMC@1, p = 0.003 after correction". ``ci``: the bootstrap interval of the mean difference; when it excludes 0
    but the signed-rank test finds no reliable difference, a second sentence says why the two disagree."""
    words, label, unit = ENDPOINT_WORDS.get(endpoint, (f"scores higher on {endpoint}", endpoint, "points"))
    if p_holm is None or math.isnan(mean_diff):
        return f"{label}: not enough queries to compare {name_a} and {name_b}."
    p_text = f"p = {p_holm:.3g}" if p_holm >= 0.001 else "p < 0.001"
    if abs(mean_diff) < 5e-4:  # under 0.05 points: nothing to tell apart
        return f"No difference in {label}: {name_a} and {name_b} score the same on these queries ({p_text})."
    better, diff = (name_a, mean_diff) if mean_diff > 0 else (name_b, -mean_diff)
    if p_holm < alpha and diff > 0:
        return f"{better} {words}: +{100 * diff:.1f} {unit} {label}, {p_text} after correction."
    text = (f"No reliable difference in {label}: {better} is ahead by {100 * diff:.1f} {unit}, but {p_text} after "
            f"correction (could be chance).")
    if ci is not None and (ci[0] > 0 or ci[1] < 0):
        # the rank test weighs how many queries move and which way, the interval how far the mean moves
        text += (f" The mean difference's 95% interval ({100 * ci[0]:+.1f} to {100 * ci[1]:+.1f} {unit}) excludes 0: "
                 "a few queries gain or lose much while most move little, which the per-query rank test weighs less.")
    return text
