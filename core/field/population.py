"""Occasions, capture histories and closed-population size estimates (M0, Mt, Mh-Chao) from a species' detections.

Pure functions over detections, arrays and dataclasses; no catalogue, no UI. Times are naive local datetimes or day
numbers, one kind per call; occasion k covers days [k*N, (k+1)*N) from ``start``; deployments' active intervals
give each occasion its effort, and a detection outside them is still counted and listed in ``outside_effort``.
Each :class:`Estimate` states its assumption in one sentence.

Time, occasions, effort, each estimator's formulas and intervals, and their sources: docs/population.md
(docs/DESIGN.md section 8 places them in the product)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, time, timedelta
from typing import Any, Union

import numpy as np
from scipy import optimize
from scipy.special import digamma, gammaln, xlogy
from scipy.stats import chi2

CHI2_1_95 = float(chi2.ppf(0.95, 1))  # 3.841458820694124
Z_975 = 1.959963984540054

TimeLike = Union[datetime, date, float, int]

ASSUMPTIONS = {
    "M0": "Every animal has the same capture probability on every occasion, and none is born, dies, arrives or "
    "leaves during the study.",
    "Mt": "Capture probability may change from occasion to occasion but is the same for every animal on a given "
    "occasion, in a population closed to births, deaths and movement.",
    "Mh-Chao": "Animals may differ in how catchable they are (each constant over time) in a closed population, "
    "and the animals seen once and twice stand for those never seen, so N is a bias-corrected lower bound.",
}


# --------------------------------------------------------------------------- occasions and histories


def occasion_index(day_offsets: Iterable[float] | np.ndarray, occasion_days: float) -> np.ndarray:
    """Occasion of each day offset (days since the study start): floor(offset / occasion_days), as int64.

    Occasion k covers [k*N, (k+1)*N). Offsets before the start (negative) are refused."""
    if not occasion_days > 0:
        raise ValueError(f"occasion_days must be positive, got {occasion_days!r}")
    d = np.asarray(day_offsets, dtype=np.float64).reshape(-1)
    if np.any(~np.isfinite(d)):
        raise ValueError("day offsets must be finite numbers")
    if np.any(d < 0):
        raise ValueError(f"{int(np.sum(d < 0))} day offset(s) fall before the start (smallest {float(d.min())!r})")
    # a small tolerance so that 3 * (1/3 day) lands in occasion 1, not 0, when occasion_days is fractional
    return np.floor(d / occasion_days + 1e-12).astype(np.int64)


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _as_datetime(x: date, what: str) -> datetime:
    if isinstance(x, datetime):
        if x.tzinfo is not None and x.tzinfo.utcoffset(x) is not None:
            raise ValueError(
                f"{what} {x.isoformat()} carries a time zone; give naive local datetimes "
                "(the deployment's local time) or day numbers"
            )
        return x
    return datetime.combine(x, time())


def _offset_fn(start: TimeLike) -> Callable[[Any, str], float]:
    """Days since ``start`` for values of start's kind (datetime/date or number)."""
    if isinstance(start, date):
        s = _as_datetime(start, "start")

        def offset(x: Any, what: str) -> float:
            if not isinstance(x, date):
                raise TypeError(f"{what} {x!r} is not a date/datetime, but start {start!r} is")
            return (_as_datetime(x, what) - s) / timedelta(days=1)

        return offset
    if _is_number(start):
        s0 = float(start)

        def offset(x: Any, what: str) -> float:
            if not _is_number(x):
                raise TypeError(f"{what} {x!r} is not a day number, but start {start!r} is")
            return float(x) - s0

        return offset
    raise TypeError(f"start must be a naive datetime, a date or a day number, got {type(start).__name__}")


@dataclass(frozen=True)
class CaptureHistories:
    """0/1 capture histories, individuals x occasions.

    ``individuals`` are in order of first detection (ties: order of first appearance in the input);
    ``occasion_bounds[k]`` = (start + k*N days, start + (k+1)*N days), of start's kind; ``effort[k]`` is the
    deployment-days active in occasion k (None without effort intervals); ``outside_effort`` lists the
    (individual, time) detections outside every active interval (still counted)."""

    individuals: tuple[Hashable, ...]
    matrix: np.ndarray
    occasion_days: float
    occasion_bounds: tuple[tuple[Any, Any], ...]
    effort: np.ndarray | None = None
    outside_effort: tuple[tuple[Hashable, Any], ...] = field(default_factory=tuple)

    @property
    def n_individuals(self) -> int:
        return len(self.individuals)

    @property
    def n_occasions(self) -> int:
        return int(self.matrix.shape[1])

    def capture_counts(self) -> dict[Hashable, int]:
        """Individual -> number of occasions on which it was detected."""
        return {ind: int(c) for ind, c in zip(self.individuals, self.matrix.sum(axis=1))}

    def surveyed(self) -> CaptureHistories:
        """The occasions that carry effort or a detection (all of them when no effort was given)."""
        if self.effort is None:
            return self
        keep = (self.effort > 0) | (self.matrix.sum(axis=0) > 0)
        if keep.all():
            return self
        idx = np.flatnonzero(keep)
        return replace(
            self,
            matrix=self.matrix[:, idx],
            occasion_bounds=tuple(self.occasion_bounds[i] for i in idx),
            effort=self.effort[idx],
        )


def capture_histories(
    detections: Iterable[tuple[Hashable, TimeLike]],
    *,
    start: TimeLike,
    occasion_days: float,
    effort: Iterable[tuple[TimeLike, TimeLike]] | None = None,
    end: TimeLike | None = None,
) -> CaptureHistories:
    """Capture histories from (individual, time) detections.

    ``start``: day 0 (the earliest deployment start); times are naive local datetimes/dates or day numbers, of one
    kind (see the module notes). ``effort``: deployment active intervals (begin, end); they give each occasion its
    effort and extend the occasions to cover them. ``end`` (optional, exclusive) fixes the last occasion:
    ceil((end - start)/N) occasions. Detections before ``start`` or at/after ``end`` are refused, naming them."""
    if not occasion_days > 0:
        raise ValueError(f"occasion_days must be positive, got {occasion_days!r}")
    offset = _offset_fn(start)
    step = float(occasion_days)

    names: list[Hashable] = []
    days: list[float] = []
    raw_times: list[Any] = []
    for i, item in enumerate(detections):
        try:
            ind, when = item
        except (TypeError, ValueError):
            raise ValueError(f"detection {i} is not an (individual, time) pair: {item!r}") from None
        names.append(ind)
        raw_times.append(when)
        days.append(offset(when, f"detection {i} ({ind!r})"))
    d = np.asarray(days, dtype=np.float64)
    before = [(names[i], raw_times[i]) for i in np.flatnonzero(d < 0)]
    if before:
        raise ValueError(f"{len(before)} detection(s) before the start {start!r}, e.g. {before[:3]!r}")

    intervals: list[tuple[float, float]] = []
    if effort is not None:
        for i, pair in enumerate(effort):
            a, b = pair
            lo, hi = offset(a, f"effort interval {i} begin"), offset(b, f"effort interval {i} end")
            if hi < lo:
                raise ValueError(f"effort interval {i} ends before it begins: {a!r} .. {b!r}")
            intervals.append((lo, hi))

    if end is not None:
        end_day = offset(end, "end")
        if end_day <= 0:
            raise ValueError(f"end {end!r} is not after start {start!r}")
        after = [(names[i], raw_times[i]) for i in np.flatnonzero(d >= end_day)]
        if after:
            raise ValueError(f"{len(after)} detection(s) at or after the end {end!r}, e.g. {after[:3]!r}")
        n_occ = int(math.ceil(end_day / step - 1e-12))
    else:
        n_occ = int(occasion_index(d, step).max()) + 1 if d.size else 0
        for lo, hi in intervals:
            if hi > 0:
                n_occ = max(n_occ, int(math.ceil(hi / step - 1e-12)))

    occ = occasion_index(d, step) if d.size else np.zeros(0, dtype=np.int64)
    first_day: dict[Hashable, float] = {}
    for ind, day in zip(names, d):
        if ind not in first_day or day < first_day[ind]:
            first_day[ind] = float(day)
    appearance = {ind: i for i, ind in reversed(list(enumerate(names)))}
    order = sorted(first_day, key=lambda ind: (first_day[ind], appearance[ind]))
    row = {ind: r for r, ind in enumerate(order)}
    mat = np.zeros((len(order), n_occ), dtype=np.uint8)
    if d.size:
        mat[[row[n] for n in names], occ] = 1

    if isinstance(start, date):
        s = _as_datetime(start, "start")
        bounds = tuple((s + timedelta(days=k * step), s + timedelta(days=(k + 1) * step)) for k in range(n_occ))
    else:
        s0 = float(start)
        bounds = tuple((s0 + k * step, s0 + (k + 1) * step) for k in range(n_occ))

    eff = None
    outside: list[tuple[Hashable, Any]] = []
    if effort is not None:
        eff = np.zeros(n_occ, dtype=np.float64)
        k_lo = np.arange(n_occ) * step
        k_hi = k_lo + step
        for lo, hi in intervals:
            eff += np.clip(np.minimum(hi, k_hi) - np.maximum(lo, k_lo), 0.0, None)
        for i, day in enumerate(d):
            if not any(lo <= day <= hi for lo, hi in intervals):
                outside.append((names[i], raw_times[i]))
    return CaptureHistories(
        individuals=tuple(order),
        matrix=mat,
        occasion_days=step,
        occasion_bounds=bounds,
        effort=eff,
        outside_effort=tuple(outside),
    )


def _matrix(histories: CaptureHistories | np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
    """The 0/1 matrix the estimates use: surveyed occasions of a CaptureHistories, or an array (any value > 0 is a
    detection). Rows without any detection are not individuals detected and are dropped."""
    if isinstance(histories, CaptureHistories):
        m = histories.surveyed().matrix
    else:
        m = np.asarray(histories)
        if m.ndim != 2:
            raise ValueError(f"capture histories must be a 2-D individuals x occasions array, got shape {m.shape}")
    m = (m > 0).astype(np.int64)
    return m[m.sum(axis=1) > 0]


def capture_frequencies(histories: CaptureHistories | np.ndarray) -> dict[int, int]:
    """k -> f_k, the number of individuals caught on exactly k occasions, for k = 1..t (zeros included)."""
    m = _matrix(histories)
    t = m.shape[1]
    counts = np.bincount(m.sum(axis=1), minlength=t + 1)
    return {k: int(counts[k]) for k in range(1, t + 1)}


def discovery_curve(histories: CaptureHistories | np.ndarray) -> list[int]:
    """Cumulative number of distinct individuals detected by the end of each occasion."""
    m = _matrix(histories)
    if m.shape[1] == 0:
        return []
    seen = np.maximum.accumulate(m, axis=1)
    return [int(x) for x in seen.sum(axis=0)]


# --------------------------------------------------------------------------- estimates


@dataclass(frozen=True)
class Estimate:
    """A population-size estimate: ``N`` with its 95% CI [``ci_low``, ``ci_high``], the model's ``assumption`` in
    one sentence, and the working in ``details``."""

    model: str
    N: float
    ci_low: float
    ci_high: float
    assumption: str
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """JSON-ready: model, N, ci_low, ci_high, assumption (infinite or undefined numbers become None)."""

        def num(x: float) -> float | None:
            return float(x) if math.isfinite(x) else None

        return {
            "model": self.model,
            "N": num(self.N),
            "ci_low": num(self.ci_low),
            "ci_high": num(self.ci_high),
            "assumption": self.assumption,
        }


def _first_at_least(ll: Callable[[float], float], lo: int, hi: int, thr: float) -> int:
    """Smallest integer in (lo, hi] with ll >= thr, given ll(lo) < thr <= ll(hi) and ll increasing there."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ll(mid) >= thr:
            hi = mid
        else:
            lo = mid
    return hi


def _last_at_least(ll: Callable[[float], float], lo: int, hi: int, thr: float) -> int:
    """Largest integer in [lo, hi) with ll >= thr, given ll(lo) >= thr > ll(hi) and ll decreasing there."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ll(mid) >= thr:
            lo = mid
        else:
            hi = mid
    return lo


_MAX_N = 1e12


def _profile(
    ll: Callable[[float], float], dll: Callable[[float], float], M: int, *, finite: bool, ll_sup: float
) -> dict:
    """Integer and real maximisers of a unimodal profile log-likelihood ll(N), N >= M (dll its derivative), and the
    integer profile-likelihood 95% interval. ``finite`` False: ll rises towards ``ll_sup`` as N -> infinity."""
    half = CHI2_1_95 / 2
    if not finite:
        thr = ll_sup - half
        if ll(M) >= thr:
            lo = M
        else:
            hi = M + 1
            while ll(hi) < thr:
                hi = M + 2 * (hi - M)
            lo = _first_at_least(ll, M, hi, thr)
        return {"N": math.inf, "N_continuous": math.inf, "ll_max": ll_sup, "ci_low": lo, "ci_high": math.inf}
    if not dll(float(M)) > 0:
        x = float(M)
    else:
        b = max(2.0 * M, M + 10.0)
        while dll(b) > 0:
            b *= 2
            if b > _MAX_N:
                raise ArithmeticError("the likelihood did not turn down below N = 1e12")
        x = float(optimize.brentq(dll, float(M), b, xtol=1e-13 * b, rtol=8 * np.finfo(float).eps, maxiter=500))
    cands = {M, max(M, math.floor(x)), max(M, math.ceil(x))}
    n_int = max(sorted(cands), key=ll)
    ll_max = ll(n_int)
    thr = ll_max - half
    if ll(M) >= thr:
        lo = M
    else:
        lo = _first_at_least(ll, M, n_int, thr)
    step = 1
    while ll(n_int + step) >= thr:
        step *= 2
        if n_int + step > _MAX_N:
            return {"N": n_int, "N_continuous": x, "ll_max": ll_max, "ci_low": lo, "ci_high": math.inf}
    hi = _last_at_least(ll, n_int + step // 2 if step > 1 else n_int, n_int + step, thr)
    return {"N": n_int, "N_continuous": x, "ll_max": ll_max, "ci_low": lo, "ci_high": hi}


#: Why there is no estimate, in one sentence each.
NO_INDIVIDUALS = "No individual was detected, so there is nothing to estimate from."
ONE_OCCASION = ("With a single occasion no animal can be caught twice, so nothing tells how many animals were never "
                "seen.")


def _undefined(model: str, M: int, why: str, **details: Any) -> Estimate:
    return Estimate(model, math.nan, math.nan, math.nan, ASSUMPTIONS[model], {"M": M, "note": why, **details})


def lognormal_interval(M: int, f0: float, variance: float) -> tuple[float, float, float]:
    """Chao's (1987) log-normal 95% interval of N = M + f0 from var(N): (M + f0/C, M + f0*C, C) with
    C = exp(1.96 sqrt(ln(1 + var/f0^2))); its lower end is above M and it holds N. (M, M, 1) when f0 = 0 (the limit
    as f0 -> 0); an infinite variance gives an infinite upper end."""
    if not f0 > 0:
        return float(M), float(M), 1.0
    if not math.isfinite(variance):
        return float(M), math.inf, math.inf
    C = math.exp(Z_975 * math.sqrt(math.log1p(variance / f0**2)))
    return M + f0 / C, M + f0 * C, C


def _profiled(model: str, N: float, fit: Mapping[str, Any], *, finite: bool, details: dict[str, Any]) -> Estimate:
    """An estimate whose CI comes from :func:`_profile`: the fit's log-likelihood and CI method join ``details``."""
    details = {**details, "loglik": fit["ll_max"],
               "ci_method": f"profile likelihood over integer N, 2*(maxLL - LL(N)) <= {CHI2_1_95:.4f}"}
    if not finite:
        details["note"] = "no individual was caught twice: the likelihood keeps rising with N"
    return Estimate(model, float(N), float(fit["ci_low"]), float(fit["ci_high"]), ASSUMPTIONS[model], details)


def m0_loglik(N: float | np.ndarray, *, individuals: int, captures: int, occasions: int) -> float | np.ndarray:
    """M0 profile log-likelihood (Otis et al. 1978 p. 105, without the constant -ln M!), real N >= M."""
    N = np.asarray(N, dtype=np.float64)
    M, n, t = individuals, captures, occasions
    out = gammaln(N + 1) - gammaln(N - M + 1) + xlogy(n, n) + xlogy(t * N - n, t * N - n) - xlogy(t * N, t * N)
    return float(out) if out.ndim == 0 else out


def m0_from_counts(*, individuals: int, captures: int, occasions: int) -> Estimate:
    """Model M0 from M (individuals detected), n. (total captures, individual-occasions) and t (occasions)."""
    M, n, t = int(individuals), int(captures), int(occasions)
    if M < 0 or t < 0 or n < M or n > M * t:
        raise ValueError(f"inconsistent counts: M={M}, n.={n}, t={t} (need M <= n. <= M*t)")
    if M == 0:
        return _undefined("M0", M, NO_INDIVIDUALS, captures=n, occasions=t)
    if t < 2:
        return _undefined("M0", M, ONE_OCCASION, captures=n, occasions=t)

    def ll(N: float) -> float:
        return m0_loglik(N, individuals=M, captures=n, occasions=t)

    def dll(N: float) -> float:  # d l / dN = psi(N+1) - psi(N-M+1) + t ln(1 - n./(tN))
        with np.errstate(divide="ignore"):  # -inf at N = M when everyone was caught every time
            return float(digamma(N + 1) - digamma(N - M + 1) + t * np.log1p(-n / (t * N)))

    finite = n > M
    ll_sup = xlogy(M, M) - xlogy(M, t) - M  # limit of ll as N -> infinity when n. = M
    fit = _profile(ll, dll, M, finite=finite, ll_sup=float(ll_sup))
    N = fit["N"]
    details = {
        "M": M,
        "captures": n,
        "occasions": t,
        "p_hat": n / (t * N) if math.isfinite(N) else 0.0,
        "N_continuous": fit["N_continuous"],
    }
    return _profiled("M0", N, fit, finite=finite, details=details)


def estimate_m0(histories: CaptureHistories | np.ndarray) -> Estimate:
    """Model M0 (constant capture probability): integer maximum-likelihood N, profile-likelihood 95% CI."""
    m = _matrix(histories)
    return m0_from_counts(individuals=m.shape[0], captures=int(m.sum()), occasions=m.shape[1])


def mt_loglik(N: float | np.ndarray, *, per_occasion: Sequence[int], individuals: int) -> float | np.ndarray:
    """Mt profile log-likelihood (Otis et al. 1978 pp. 106-107, without -ln M!), p_j = n_j/N, real N >= M:
    ln N!/(N-M)! + sum_j [n_j ln n_j + (N - n_j) ln(N - n_j) - N ln N]."""
    N = np.asarray(N, dtype=np.float64)
    nj = np.asarray(per_occasion, dtype=np.float64)
    Nb = N[..., None]
    terms = xlogy(nj, nj) + xlogy(Nb - nj, Nb - nj) - xlogy(Nb, Nb)
    out = gammaln(N + 1) - gammaln(N - individuals + 1) + terms.sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def darroch_root(per_occasion: Sequence[int], individuals: int) -> float:
    """Darroch's N: the root N > M of prod_j (1 - n_j/N) = 1 - M/N; M when an occasion caught everyone (or the root
    is within 1e-15 M of M), inf without recaptures (sum n_j = M)."""
    nj = np.asarray(per_occasion, dtype=np.float64)
    M = float(individuals)
    if nj.sum() <= M:
        return math.inf
    if nj.max() >= M:
        return M

    def g(N: float) -> float:
        return float(np.sum(np.log1p(-nj / N)) - math.log1p(-M / N))

    lo = None
    for eps in (1e-1, 1e-3, 1e-6, 1e-9, 1e-12, 1e-15):
        cand = M * (1 + eps)
        if g(cand) > 0:
            lo = cand
            break
    if lo is None:
        return M
    hi = 2 * max(M, 1.0)
    while g(hi) > 0:
        hi *= 2
        if hi > _MAX_N:
            return math.inf
    return float(optimize.brentq(g, lo, hi, xtol=1e-12 * hi, rtol=4 * np.finfo(float).eps, maxiter=500))


def mt_from_counts(per_occasion: Sequence[int], *, individuals: int) -> Estimate:
    """Model Mt from n_j (individuals caught on each occasion) and M (individuals detected)."""
    nj = [int(x) for x in per_occasion]
    M = int(individuals)
    t = len(nj)
    if any(x < 0 or x > M for x in nj) or sum(nj) < M or (M > 0 and t == 0):
        raise ValueError(f"inconsistent counts: M={M}, n_j={nj} (need 0 <= n_j <= M and sum n_j >= M)")
    if M == 0:
        return _undefined("Mt", M, NO_INDIVIDUALS, per_occasion=nj)
    if t < 2:
        return _undefined("Mt", M, ONE_OCCASION, per_occasion=nj)

    def ll(N: float) -> float:
        return mt_loglik(N, per_occasion=nj, individuals=M)

    nja = np.asarray(nj, dtype=np.float64)

    def dll(N: float) -> float:  # psi(N+1) - psi(N-M+1) + sum_j ln(1 - n_j/N)
        with np.errstate(divide="ignore"):  # -inf at N = M when an occasion caught everyone
            return float(digamma(N + 1) - digamma(N - M + 1) + np.sum(np.log1p(-nja / N)))

    finite = sum(nj) > M
    ll_sup = float(sum(xlogy(x, x) for x in nj) - M)  # limit as N -> infinity when sum n_j = M
    fit = _profile(ll, dll, M, finite=finite, ll_sup=ll_sup)
    N = darroch_root(nj, M)
    details = {
        "M": M,
        "per_occasion": nj,
        "occasions": t,
        "p_hat": [x / N for x in nj] if math.isfinite(N) else [0.0] * t,
        "N_profile": fit["N"],
        "N_mle": fit["N_continuous"],
    }
    if not finite or not math.isfinite(N):
        return _profiled("Mt", N, fit, finite=False, details=details)
    variance = darroch_variance(nj, individuals=M, N=N)
    lo, hi, C = lognormal_interval(M, N - M, variance)
    details.update({"f0_hat": N - M, "variance": variance, "se": math.sqrt(variance), "C": C, "loglik": ll(N),
                    "ci_method": "Chao (1987) log-normal on f0 = N - M with Darroch's variance: [M + f0/C, M + f0*C], "
                                 "C = exp(1.96 sqrt(ln(1 + var/f0^2)))"})
    return Estimate("Mt", float(N), float(lo), float(hi), ASSUMPTIONS["Mt"], details)


def darroch_variance(per_occasion: Sequence[int], *, individuals: int, N: float) -> float:
    """Darroch's asymptotic variance of Mt's N, [1/(N-M) + (t-1)/N - sum_j 1/(N-n_j)]^-1: 0 when N = M (an occasion
    caught every animal seen), inf when the bracket is not positive (a flat likelihood)."""
    M = float(individuals)
    if N <= M:
        return 0.0
    nj = np.asarray(per_occasion, dtype=np.float64)
    if np.any(nj >= N):
        return 0.0
    bracket = 1.0 / (N - M) + (len(nj) - 1) / N - float(np.sum(1.0 / (N - nj)))
    return 1.0 / bracket if bracket > 0 else math.inf


def estimate_mt(histories: CaptureHistories | np.ndarray) -> Estimate:
    """Model Mt (capture probability varies by occasion): Darroch's N, profile-likelihood 95% CI."""
    m = _matrix(histories)
    return mt_from_counts(m.sum(axis=0).tolist(), individuals=m.shape[0])


def chao_variance(f1: int, f2: int) -> float:
    """Chao's bias-corrected variance of N = M + f1(f1-1)/(2(f2+1))."""
    a, b = float(f1), float(f2) + 1.0
    return a * (a - 1) / (2 * b) + a * (2 * a - 1) ** 2 / (4 * b**2) + a**2 * (b - 1) * (a - 1) ** 2 / (4 * b**4)


def mh_chao_from_frequencies(frequencies: Mapping[int, int] | Sequence[int], *, occasions: int | None = None
                              ) -> Estimate:
    """Mh-Chao from capture frequencies: a mapping k -> f_k or a sequence (f_1, f_2, ...). ``occasions`` (t, when
    known): fewer than two give no estimate."""
    if isinstance(frequencies, Mapping):
        f = {int(k): int(v) for k, v in frequencies.items()}
    else:
        f = {k + 1: int(v) for k, v in enumerate(frequencies)}
    if any(k < 1 or v < 0 for k, v in f.items()):
        raise ValueError(f"capture frequencies need k >= 1 and f_k >= 0, got {f}")
    M = sum(f.values())
    f1, f2 = f.get(1, 0), f.get(2, 0)
    if M == 0:
        return _undefined("Mh-Chao", M, NO_INDIVIDUALS, f1=f1, f2=f2)
    if occasions is not None and occasions < 2:
        return _undefined("Mh-Chao", M, ONE_OCCASION, f1=f1, f2=f2, occasions=occasions)
    f0 = f1 * (f1 - 1) / (2 * (f2 + 1))
    var = chao_variance(f1, f2)
    details: dict[str, Any] = {
        "M": M,
        "f1": f1,
        "f2": f2,
        "f0_hat": f0,
        "variance": var,
        "se": math.sqrt(var),
        "N_uncorrected": M + f1**2 / (2 * f2) if f2 > 0 else None,
        "ci_method": "Chao (1987) log-normal: [M + f0/C, M + f0*C], C = exp(1.96 sqrt(ln(1 + var/f0^2)))",
    }
    if f0 > 0:
        lo, hi, C = lognormal_interval(M, f0, var)
        details["C"] = C
    else:
        lo, hi, var_obs, P = no_singleton_interval(f, occasions=occasions)
        details.update(variance=var_obs, se=math.sqrt(var_obs), P=P, ci_method=NO_SINGLETON_CI)
        details["note"] = (
            "f0_hat = 0 (at most one animal seen only once): N is the animals seen, and the interval is EstimateS's "
            "for that case, which still allows for animals no occasion caught"
            if math.isfinite(hi) else "every animal seen was caught once: no upper bound")
    return Estimate("Mh-Chao", float(M + f0), float(lo), float(hi), ASSUMPTIONS["Mh-Chao"], details)


NO_SINGLETON_CI = ("EstimateS (Colwell) for f0_hat = 0: var = sum_k f_k (e^-k - e^-2k) - (sum_k k e^-k f_k)^2 / t, "
                   "P = sum_k f_k e^-k / M, upper end M/(1-P) + 1.96 sqrt(var)/(1-P); lower end M")


def no_singleton_interval(frequencies: Mapping[int, int], *, occasions: int | None) -> tuple[float, float, float,
                                                                                               float]:
    """(low, high, variance, P) of Mh-Chao when f0_hat = 0: the EstimateS User's Guide's variance (eq. 12, for
    incidence over t samples) and interval (eq. 14). e^-k is the chance that an animal caught k times in t is
    missed by all of them, so P is the share of the animals seen that a like study would miss. The lower end is M
    itself: EstimateS's, max(M, M/(1-P) - 1.96 sqrt(var)/(1-P)), can rise above N = M and leave the estimate
    outside its own interval. Without ``t`` the variance's second term is left out (t -> infinity), which widens
    the interval. Every animal caught once (EstimateS leaves it undefined): (M, inf)."""
    f = {int(k): int(v) for k, v in frequencies.items() if int(v) > 0}
    M = sum(f.values())
    if set(f) == {1}:
        return float(M), math.inf, math.nan, math.exp(-1.0)
    var = sum(v * (math.exp(-k) - math.exp(-2 * k)) for k, v in f.items())
    if occasions:
        var -= sum(k * math.exp(-k) * v for k, v in f.items()) ** 2 / occasions
    var = max(var, 0.0)
    P = sum(v * math.exp(-k) for k, v in f.items()) / M
    return float(M), M / (1 - P) + Z_975 * math.sqrt(var) / (1 - P), var, P


def estimate_mh_chao(histories: CaptureHistories | np.ndarray) -> Estimate:
    """Mh-Chao (heterogeneous capture probability): bias-corrected N, Chao's 1987 log-normal 95% CI."""
    m = _matrix(histories)
    return mh_chao_from_frequencies(capture_frequencies(m), occasions=m.shape[1])


def estimate_all(histories: CaptureHistories | np.ndarray) -> list[Estimate]:
    """M0, Mt and Mh-Chao, in that order."""
    return [estimate_m0(histories), estimate_mt(histories), estimate_mh_chao(histories)]
