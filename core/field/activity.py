"""Diel activity as a von Mises kernel density, and the overlap of two activity patterns, as the R package overlap
computes them (Ridout & Linkie 2009; Meredith & Ridout, overlap 0.3.5). Formulas and sources: docs/activity.md.

Times are clock times of day in radians, 0 at midnight, in [0, 2π), one per independent event, not one per photo
(a burst of 30 frames is one visit); :func:`check_times` refuses fewer than :data:`MIN_DETECTIONS`. Each function
matches one of overlap's: :func:`density_fit` ``densityFit``, :func:`bandwidth` ``getBandWidth`` (each root found
as R's ``uniroot`` finds it, so the figures are overlap's), :func:`overlap_estimates` ``overlapEst``,
:func:`overlap_true` ``overlapTrue``, :func:`boot_ci` ``bootCI``, :func:`bootstrap_overlap` ``resample(smooth =
TRUE)`` then ``bootEst``.

:func:`fit_activity` and :func:`overlap` are the two calls a service makes; :func:`read_record_table` reads the
times from a camtrapR record table (``Species`` with ``DateTimeOriginal``, or ``Date`` and ``Time``)."""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, time
from pathlib import Path

import numpy as np
from scipy.special import i0e, ive
from scipy.stats import norm
from threadpoolctl import threadpool_limits

TWO_PI = 2.0 * math.pi
#: Fewer detections than this give no activity curve: the bandwidth rule and the overlap estimators need a sample.
MIN_DETECTIONS = 10
#: overlap's smoothing adjustments for Δ̂₁, Δ̂₄ and Δ̂₅ (the bandwidth is divided by them).
DEFAULT_ADJUST = (0.8, 1.0, 4.0)
#: Points on [0, 2π] at which overlapEst evaluates the densities (and interpolates when samples are large).
DEFAULT_GRID = 128
#: Points on [0, 2π] of the fitted densities the smoothed bootstrap draws from (overlap's ``resample``).
RESAMPLE_GRID = 512
#: The interval getBandWidth searches for a concentration, and R's uniroot tolerance (.Machine$double.eps ^ 0.25).
KAPPA_INTERVAL = (1e-4, 345.0)
KAPPA_TOL = 2.0 ** -13
ESTIMATORS = ("Dhat1", "Dhat4", "Dhat5")
#: Interval methods of bootCI; basic0 is the one overlap's authors recommend with a smoothed bootstrap.
CI_METHODS = ("norm", "norm0", "basic", "basic0", "perc")
#: Row x column cells evaluated at once; bounds the memory of a density at many points (32 MiB of doubles).
_CHUNK_CELLS = 1 << 22


# --------------------------------------------------------------------------- input


def clock_radians(hour: int, minute: int, second: float = 0.0) -> float:
    """The clock time ``hour:minute:second`` as radians after midnight: 2π · seconds / 86,400."""
    seconds = hour * 3600 + minute * 60 + second
    if not 0 <= seconds < 86400:
        raise ValueError(f"{hour:02d}:{minute:02d}:{second:02g} is not a clock time between 00:00:00 and 23:59:59")
    return TWO_PI * seconds / 86400.0


def times_to_radians(times: Iterable[datetime | time]) -> np.ndarray:
    """The local clock time of each ``datetime`` or ``time`` as radians after midnight (the date is ignored).

    Give the local clock time the camera wrote: an aware datetime is read on its own clock, not converted to UTC,
    because activity is about the animal's day where it lives."""
    out = []
    for t in times:
        if not isinstance(t, (datetime, time)):
            raise TypeError(f"{t!r} is not a date-time or a time of day")
        out.append(clock_radians(t.hour, t.minute, t.second + t.microsecond / 1e6))
    return np.asarray(out, dtype=float)


def check_times(times_rad: Iterable[float] | np.ndarray, *, label: str = "the sample",
                minimum: int = MIN_DETECTIONS) -> np.ndarray:
    """``times_rad`` as a float array, refused with a ``ValueError`` that says what to do when it holds fewer than
    ``minimum`` times, or a time that is not a number in [0, 2π) (the first few named by position and value)."""
    try:
        x = np.asarray(times_rad, dtype=float).ravel()
    except (TypeError, ValueError):
        raise ValueError(f"{label}: the times must be numbers (radians after midnight)") from None
    bad = np.flatnonzero(~(np.isfinite(x) & (x >= 0.0) & (x < TWO_PI)))
    if bad.size:
        shown = ", ".join(f"#{i + 1} = {float(x[i])!r}" for i in bad[:5]) + (" ..." if bad.size > 5 else "")
        raise ValueError(f"{label}: {bad.size} time(s) outside [0, 2π) radians ({shown}); give clock times as radians "
                         f"after midnight (2π · hours / 24)")
    if x.size < minimum:
        raise ValueError(f"{label}: only {x.size} detection(s); an activity curve needs at least {minimum} "
                         f"independent detections (one per event). Widen the date window, add stations, or pool "
                         f"groups (for example all individuals of the species) before asking again")
    if np.unique(x).size < 2:
        raise ValueError(f"{label}: all {x.size} detections are at the same time of day; a density needs at least "
                         f"two different times")
    return x


# --------------------------------------------------------------------------- kernel density and bandwidth


class _Powers:
    """e^{ikx} for k = 1 .. K at fixed points, extended on demand. The bootstrap shares one table for overlap's
    512-point resampling grid and one for overlapEst's grid, so no resample computes a cosine or an exponential."""

    __slots__ = ("_table", "points")

    def __init__(self, points: np.ndarray) -> None:
        self.points = points
        self._table = np.zeros((0, points.size), dtype=complex)

    def upto(self, k_max: int) -> np.ndarray:
        have = self._table.shape[0]
        if have < k_max:
            z = np.exp(1j * self.points)
            rows = np.empty((k_max - have, z.size), dtype=complex)
            power = z ** (have + 1)
            for j in range(rows.shape[0]):
                rows[j] = power
                power = power * z
            self._table = np.concatenate([self._table, rows])
        return self._table[:k_max]


class _Sample:
    """Times with a count each: raw data (count 1 each) or a resample drawn on a grid (how often each point).

    Keeps its trigonometric moments M_k = Σ count · e^{ikx} / n once computed: the bandwidth rule needs the first
    three, and the Fourier form of the density (:func:`_density`) the first K, for every bandwidth asked. A resample
    knows its counts on the whole grid and the grid's powers, which make its moments one product."""

    __slots__ = ("_grid_counts", "_grid_powers", "_moments", "counts", "n", "points")

    def __init__(self, points: np.ndarray, counts: np.ndarray | None = None, n: float | None = None, *,
                 grid_powers: _Powers | None = None, grid_counts: np.ndarray | None = None) -> None:
        self.points = points
        self.counts = np.ones_like(points) if counts is None else counts
        self.n = float(points.size) if n is None else float(n)
        self._grid_powers, self._grid_counts = grid_powers, grid_counts
        self._moments = np.zeros(0, dtype=complex)

    @classmethod
    def of(cls, times_rad: np.ndarray) -> _Sample:
        return cls(times_rad)

    @classmethod
    def on_grid(cls, powers: _Powers, counts: np.ndarray) -> _Sample:
        """A resample given as how many draws fell on each grid point."""
        support = np.flatnonzero(counts)
        return cls(powers.points[support], counts[support].astype(float), float(counts.sum()), grid_powers=powers,
                   grid_counts=counts.astype(complex))  # complex @ complex runs in BLAS, complex @ float does not

    def has_moments(self, k_max: int) -> bool:
        return self._grid_powers is not None or self._moments.size >= k_max

    def moments(self, k_max: int) -> np.ndarray:
        """M_1 .. M_k_max (complex); M_k's length is the k-th moment's length about the mean direction."""
        have = self._moments.size
        if have < k_max and self._grid_powers is not None:
            self._moments = self._grid_powers.upto(k_max) @ self._grid_counts / self.n
        elif have < k_max:
            z = np.exp(1j * self.points)
            power = z ** (have + 1)
            counts = self.counts.astype(complex)
            extra = np.empty(k_max - have, dtype=complex)
            for j in range(extra.size):  # one pass per order keeps memory at one row of the sample
                extra[j] = power @ counts
                power *= z
            self._moments = np.concatenate([self._moments, extra / self.n])
        return self._moments[:k_max]


def _kernel_coefficients(kappa: float) -> np.ndarray:
    """A_k(κ) = I_k(κ) / I_0(κ) for k = 1 .. K, K the last order above 1e-17: the von Mises kernel's Fourier
    coefficients, which fall like exp(-k² / 2κ), so K is about sqrt(80 κ)."""
    k = np.arange(1, int(math.sqrt(80.0 * kappa)) + 25)
    coefficients = ive(k, kappa) / i0e(kappa)
    keep = np.flatnonzero(coefficients > 1e-17)
    return coefficients[: keep[-1] + 1] if keep.size else coefficients[:1]


#: A kernel term summed directly (a cosine and an exponential) costs about this many Fourier terms (a product).
_DIRECT_COST = 8
#: Below this fraction of the density's bound the Fourier sum is replaced by the direct one (see _density).
_FOURIER_FLOOR = 1e-8


def _density(sample: _Sample, at: np.ndarray | _Powers, kappa: float) -> np.ndarray:
    """The von Mises kernel density of ``sample`` with concentration ``kappa`` at the radians ``at`` (or at the
    points of a table of their powers).

    Summed directly, exp(κ(cos d - 1)) / (2π e^-κ I₀(κ)) (e^κ taken out of both, so nothing overflows), or, when
    that is cheaper (many times and many points), as its Fourier series
    f(θ) = [1 + 2 Σ_k A_k(κ) Re(e^{ikθ} conj(M_k))] / 2π, exact to the 1e-17 its terms are cut at."""
    at_powers = at if isinstance(at, _Powers) else None
    points = at_powers.points if at_powers is not None else np.asarray(at, dtype=float).ravel()
    coefficients = _kernel_coefficients(kappa)
    k_max = coefficients.size
    fourier_cost = k_max * ((0 if sample.has_moments(k_max) else sample.points.size)
                            + (0 if at_powers is not None else points.size))
    if fourier_cost < _DIRECT_COST * sample.points.size * points.size:
        weights = coefficients * np.conj(sample.moments(k_max))
        if at_powers is not None:
            total = (weights @ at_powers.upto(k_max)).real
        else:
            z = np.exp(1j * points)
            power = z.copy()
            total = np.zeros(points.size)
            for w in weights:
                total += (power * w).real
                power *= z
        density = (1.0 + 2.0 * total) / TWO_PI
        # the series is exact to rounding of its largest terms, about 1e-16 of the peak: where the density is far
        # below the peak (the tails of a narrow kernel) sum it directly, so it keeps its sign and relative digits
        low = np.flatnonzero(density < _FOURIER_FLOOR * (1.0 + 2.0 * coefficients.sum()) / TWO_PI)
        if low.size:
            density[low] = _direct_density(sample, points[low], kappa)
        return density
    return _direct_density(sample, points, kappa)


def _direct_density(sample: _Sample, points: np.ndarray, kappa: float) -> np.ndarray:
    scale = sample.n * TWO_PI * float(i0e(kappa))
    out = np.empty(points.size)
    rows = max(1, _CHUNK_CELLS // max(1, sample.points.size))
    for start in range(0, points.size, rows):
        d = points[start:start + rows, None] - sample.points[None, :]
        out[start:start + rows] = np.exp(kappa * (np.cos(d) - 1.0)) @ sample.counts
    return out / scale


def density_fit(times_rad: Iterable[float] | np.ndarray, grid_rad: Iterable[float] | np.ndarray,
                bandwidth: float) -> np.ndarray:
    """overlap's ``densityFit``: the von Mises kernel density of the times (radians) at the points ``grid_rad``,
    ``bandwidth`` being the kernel's concentration κ (larger is narrower). No checks beyond numbers, as in R."""
    x = np.asarray(times_rad, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("a density needs at least one time")
    return _density(_Sample.of(x), np.asarray(grid_rad, dtype=float), float(bandwidth))


def _zeroin(f: Callable[[float], float], lower: float, upper: float, f_lower: float, f_upper: float,
            tol: float, max_iter: int = 1000) -> float:
    """A root of ``f`` in [lower, upper] by Brent's (1973) zeroin, step for step as R's ``uniroot`` runs it, so the
    bandwidth agrees with overlap's to the last digit it shows (the root is only as exact as ``tol``)."""
    eps = sys.float_info.epsilon
    a, b, fa, fb = lower, upper, f_lower, f_upper
    c, fc = a, fa
    if fa == 0.0:
        return a
    if fb == 0.0:
        return b
    for _ in range(max_iter + 1):
        prev_step = b - a
        if abs(fc) < abs(fb):  # b must be the best approximation so far
            a, b, c = b, c, b
            fa, fb, fc = fb, fc, fb
        tol_act = 2.0 * eps * abs(b) + tol / 2.0
        new_step = (c - b) / 2.0
        if abs(new_step) <= tol_act or fb == 0.0:
            return b
        if abs(prev_step) >= tol_act and abs(fa) > abs(fb):  # try interpolation
            cb = c - b
            if a == c:  # two points: secant
                t1 = fb / fa
                p, q = cb * t1, 1.0 - t1
            else:  # inverse quadratic
                q, t1, t2 = fa / fc, fb / fc, fb / fa
                p = t2 * (cb * q * (q - t1) - (b - a) * (t1 - 1.0))
                q = (q - 1.0) * (t1 - 1.0) * (t2 - 1.0)
            if p > 0.0:
                q = -q
            else:
                p = -p
            if p < 0.75 * cb * q - abs(tol_act * q) / 2.0 and p < abs(prev_step * q / 2.0):
                new_step = p / q
        if abs(new_step) < tol_act:
            new_step = tol_act if new_step > 0.0 else -tol_act
        a, fa = b, fb
        b += new_step
        fb = f(b)
        if (fb > 0.0 and fc > 0.0) or (fb < 0.0 and fc < 0.0):
            c, fc = a, fa
    return b


def _bandwidth_or_nan(sample: _Sample, kmax: int) -> float:
    kappa_hat = 0.0
    lo, hi = KAPPA_INTERVAL
    lengths = np.abs(sample.moments(kmax))  # the k-th moment's length about the mean direction
    for k in range(1, kmax + 1):
        moment = float(lengths[k - 1])

        def excess(kappa: float, k: int = k, moment: float = moment) -> float:
            # A_k(κ) = I_k(κ) / I_0(κ), exponentially scaled in both so large κ does not overflow
            return float(ive(k, kappa) / i0e(kappa)) - moment

        f_lo, f_hi = excess(lo), excess(hi)
        if f_lo * f_hi <= 0.0:  # overlap skips a moment whose equation has no root in the interval
            kappa_hat = max(kappa_hat, _zeroin(excess, lo, hi, f_lo, f_hi, KAPPA_TOL))
    if kappa_hat <= 0.0:
        return math.nan
    # I₂(2κ̂) / I₀(κ̂)² with e^{2κ̂} taken out of both
    ratio = float(ive(2, 2.0 * kappa_hat) / i0e(kappa_hat) ** 2)
    return (3.0 * sample.n * kappa_hat ** 2 * ratio / (4.0 * math.sqrt(math.pi))) ** 0.4


def bandwidth(times_rad: Iterable[float] | np.ndarray, *, kmax: int = 3) -> float:
    """overlap's ``getBandWidth``: the concentration κ of the von Mises kernel by Taylor's (2008) rule, κ̂ the
    largest of the concentrations matched to the first ``kmax`` trigonometric moments.

    Refused (``ValueError``) when no moment gives a concentration in [1e-4, 345]: the times are spread evenly
    round the clock or bunched at a single moment; R returns NA there."""
    x = np.asarray(times_rad, dtype=float).ravel()
    if x.size == 0:
        raise ValueError("a bandwidth needs at least one time")
    bw = _bandwidth_or_nan(_Sample.of(x), kmax)
    if math.isnan(bw):
        raise ValueError(f"no bandwidth for these {x.size} times: no von Mises concentration between "
                         f"{KAPPA_INTERVAL[0]:g} and {KAPPA_INTERVAL[1]:g} matches their first {kmax} trigonometric "
                         f"moments (the times are nearly all at one moment, or spread almost perfectly evenly round "
                         f"the clock); check that they are clock times in radians")
    return bw


@dataclass(frozen=True, eq=False)
class ActivityFit:
    """A diel activity pattern: the times it was fitted to and the kernel's concentration."""

    times_rad: np.ndarray
    bandwidth: float  # κ of the kernel, after dividing the rule's value by ``adjust``
    rule_bandwidth: float  # κ by getBandWidth's rule, before ``adjust``
    adjust: float
    kmax: int
    label: str = ""

    @property
    def n(self) -> int:
        return int(self.times_rad.size)

    def density(self, at_rad: Iterable[float] | np.ndarray) -> np.ndarray:
        """The density (per radian, integrating to 1 over [0, 2π)) at the radians ``at_rad``."""
        return _density(_Sample.of(self.times_rad), np.asarray(at_rad, dtype=float), self.bandwidth)

    def curve(self, *, n_grid: int = DEFAULT_GRID, per_hour: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(x, y)`` for a plot over one day, ``n_grid`` points from 0 to 2π inclusive: radians and density per
        radian, or with ``per_hour`` hours 0..24 and density per hour (the radian density times 2π / 24)."""
        grid = np.linspace(0.0, TWO_PI, n_grid)
        y = self.density(grid)
        if per_hour:
            return grid * 24.0 / TWO_PI, y * TWO_PI / 24.0
        return grid, y

    def as_dict(self, *, n_grid: int = DEFAULT_GRID) -> dict[str, object]:
        """Plain numbers for JSON: the group, its size, the bandwidths and the curve over 0..24 h per hour."""
        hours, per_hour = self.curve(n_grid=n_grid, per_hour=True)
        return {"label": self.label, "n": self.n, "bandwidth": self.bandwidth, "rule_bandwidth": self.rule_bandwidth,
                "adjust": self.adjust, "hours": hours.tolist(), "density_per_hour": per_hour.tolist()}


def fit_activity(times_rad: Iterable[float] | np.ndarray, *, kmax: int = 3, adjust: float = 1.0,
                 label: str = "the sample") -> ActivityFit:
    """The activity pattern of one group (a species, an individual, a sex): a von Mises kernel density of its
    detection times (radians after midnight, one per independent event) with overlap's bandwidth divided by
    ``adjust`` (1 as densityPlot draws it; a larger ``adjust`` is a smaller κ, a smoother curve).

    Refused with words that say what to do: fewer than :data:`MIN_DETECTIONS` times, a time outside [0, 2π), or
    times with no bandwidth (``label`` names the group in the message)."""
    if not adjust > 0:
        raise ValueError(f"adjust must be a positive number, got {adjust!r}")
    x = check_times(times_rad, label=label).copy()
    x.flags.writeable = False  # the fit keeps the times it was fitted to
    try:
        rule = bandwidth(x, kmax=kmax)
    except ValueError as exc:
        raise ValueError(f"{label}: {exc}") from None
    return ActivityFit(times_rad=x, bandwidth=rule / adjust, rule_bandwidth=rule, adjust=float(adjust), kmax=kmax,
                       label=label)


@dataclass(frozen=True)
class GroupFits:
    """Activity per group (individuals, sexes, species): the groups that could be fitted, and for each that could
    not, the words saying why (most often fewer than :data:`MIN_DETECTIONS` detections)."""

    fits: Mapping[str, ActivityFit]
    refused: Mapping[str, str]


def fit_groups(times_by_group: Mapping[str, Iterable[float] | np.ndarray], *, kmax: int = 3,
               adjust: float = 1.0) -> GroupFits:
    """:func:`fit_activity` for each group (name -> radians, one per independent event), in the mapping's order; a
    group that cannot be fitted is set aside with its reason instead of stopping the others."""
    fits: dict[str, ActivityFit] = {}
    refused: dict[str, str] = {}
    for name, times in times_by_group.items():
        try:
            fits[name] = fit_activity(times, kmax=kmax, adjust=adjust, label=str(name))
        except ValueError as exc:
            refused[name] = str(exc)
    return GroupFits(fits=fits, refused=refused)


# --------------------------------------------------------------------------- overlap


def overlap_true(d1: Sequence[float] | np.ndarray, d2: Sequence[float] | np.ndarray) -> float:
    """overlap's ``overlapTrue``: the coefficient of overlapping Δ = ∫ min(f, g) of two densities given at
    equidistant points round the circle (the last point dropped when it repeats the first, as at 0 and 2π)."""
    a, b = np.asarray(d1, dtype=float).ravel(), np.asarray(d2, dtype=float).ravel()
    if a.size != b.size or a.size < 2:
        raise ValueError(f"give two densities at the same points (got {a.size} and {b.size} values)")
    if math.isclose(a[0], a[-1], rel_tol=1.5e-8) and math.isclose(b[0], b[-1], rel_tol=1.5e-8):
        a, b = a[1:], b[1:]
    return float(np.minimum(a / a.sum(), b / b.sum()).sum())


def _adjustments(adjust: float | Sequence[float | None]) -> tuple[float, float, float]:
    values = (adjust,) * 3 if isinstance(adjust, (int, float)) else tuple(adjust)
    if len(values) != 3:
        raise ValueError(f"adjust: give one number or three (for Dhat1, Dhat4, Dhat5), got {len(values)}")
    out = tuple(math.nan if v is None else float(v) for v in values)
    if any(not (math.isnan(v) or v > 0) for v in out):
        raise ValueError(f"adjust: each must be a positive number (or None to skip that estimator), got {adjust!r}")
    return out  # type: ignore[return-value]


def _estimates(a: _Sample, b: _Sample, *, kmax: int, adjust: tuple[float, float, float], n_grid: int,
               grid_powers: _Powers | None = None) -> np.ndarray:
    """Δ̂₁, Δ̂₄ and Δ̂₅ as overlapEst computes them (NaN where adjust is NaN or no bandwidth exists);
    ``grid_powers``, when given, holds the powers of the ``n_grid`` points, kept from one resample to the next."""
    out = np.full(3, np.nan)
    bw_a, bw_b = _bandwidth_or_nan(a, kmax), _bandwidth_or_nan(b, kmax)
    if math.isnan(bw_a) or math.isnan(bw_b):
        return out
    grid = grid_powers if grid_powers is not None else _Powers(np.linspace(0.0, TWO_PI, n_grid))
    interpolate = a.n + b.n > n_grid * 1.1  # overlapEst's switch to densities on the grid, interpolated
    with np.errstate(divide="ignore", invalid="ignore"):
        for i, adj in enumerate(adjust):
            if math.isnan(adj):
                continue
            ka, kb = bw_a / adj, bw_b / adj
            if i == 0:  # Δ̂₁: the densities on the grid (0 and 2π once), each scaled to sum to 1
                da, db = _density(a, grid, ka)[1:], _density(b, grid, kb)[1:]
                out[0] = np.minimum(da / da.sum(), db / db.sum()).sum()
                continue
            if interpolate:
                da_grid, db_grid = _density(a, grid, ka), _density(b, grid, kb)
                nodes = grid.points
                da_at_a, db_at_a = np.interp(a.points, nodes, da_grid), np.interp(a.points, nodes, db_grid)
                da_at_b, db_at_b = np.interp(b.points, nodes, da_grid), np.interp(b.points, nodes, db_grid)
            else:
                da_at_a, db_at_a = _density(a, a.points, ka), _density(b, a.points, kb)
                da_at_b, db_at_b = _density(a, b.points, ka), _density(b, b.points, kb)
            if i == 1:  # Δ̂₄: mean of min(1, g/f) over A's times and of min(1, f/g) over B's, averaged
                out[1] = (np.dot(a.counts, np.minimum(1.0, db_at_a / da_at_a)) / a.n
                          + np.dot(b.counts, np.minimum(1.0, da_at_b / db_at_b)) / b.n) / 2.0
            else:  # Δ̂₅: share of A's times where g > f plus share of B's where f >= g
                out[2] = (np.dot(a.counts, db_at_a > da_at_a) / a.n + np.dot(b.counts, da_at_b >= db_at_b) / b.n)
    return out


def _times_of(sample: ActivityFit | Iterable[float] | np.ndarray, label: str) -> np.ndarray:
    if isinstance(sample, ActivityFit):
        return sample.times_rad
    return check_times(sample, label=label)


def overlap_estimates(a: ActivityFit | Iterable[float] | np.ndarray, b: ActivityFit | Iterable[float] | np.ndarray,
                      *, kmax: int = 3, adjust: float | Sequence[float | None] = DEFAULT_ADJUST,
                      n_grid: int = DEFAULT_GRID, labels: tuple[str, str] = ("A", "B")) -> dict[str, float]:
    """overlap's ``overlapEst``: ``{"Dhat1": ..., "Dhat4": ..., "Dhat5": ...}`` for two samples of times (radians;
    an :class:`ActivityFit` gives its times). ``adjust`` divides each estimator's bandwidth (None skips it)."""
    xa, xb = _times_of(a, labels[0]), _times_of(b, labels[1])
    with threadpool_limits(limits=1, user_api="blas"):  # see bootstrap_overlap
        est = _estimates(_Sample.of(xa), _Sample.of(xb), kmax=kmax, adjust=_adjustments(adjust), n_grid=n_grid)
    return dict(zip(ESTIMATORS, (float(v) for v in est)))


def _quantile_interpolated(bt: np.ndarray, conf: float) -> tuple[float, float]:
    """bootCI's ``quantileInter``: the (1 ± conf)/2 order statistics of ``bt``, interpolated on the normal scale
    between neighbouring ranks (R + 1) α as boot.ci does; NaN when there are too few values."""
    r = bt.size
    alpha = np.array([(1.0 - conf) / 2.0, (1.0 + conf) / 2.0])
    rk = (r + 1) * alpha
    if not np.all((rk > 1) & (rk < r)):
        return math.nan, math.nan
    k = np.trunc(rk).astype(int)
    ordered = np.sort(bt)
    lo_vals, hi_vals = ordered[k - 1], ordered[k]  # the k-th and (k+1)-th smallest
    if np.all(k == rk):
        return float(lo_vals[0]), float(lo_vals[1])
    wanted, too_lo, too_hi = norm.ppf(alpha), norm.ppf(k / (r + 1)), norm.ppf((k + 1) / (r + 1))
    out = lo_vals + (wanted - too_lo) / (too_hi - too_lo) * (hi_vals - lo_vals)
    return float(out[0]), float(out[1])


def _fewest_resamples(conf: float) -> int:
    """The fewest bootstrap estimates :func:`_quantile_interpolated` makes an interval of at level ``conf``: ranks
    (R + 1)(1 ± conf)/2 strictly between 1 and R, in the same floating point arithmetic."""
    alpha = ((1.0 - conf) / 2.0, (1.0 + conf) / 2.0)
    r = 2
    while not ((r + 1) * alpha[0] > 1 and (r + 1) * alpha[1] < r):
        r += 1
    return r


def boot_ci(estimate: float, bootstraps: Iterable[float] | np.ndarray, *, conf: float = 0.95
            ) -> dict[str, tuple[float, float]]:
    """overlap's ``bootCI``: the five intervals from the bootstrap estimates (non-finite ones dropped).

    With bias = mean(bootstraps) - estimate and merr = sd(bootstraps) · z₍₁₊conf₎/₂: norm = estimate - bias ± merr,
    norm0 = estimate ± merr, perc = the interpolated percentiles, basic = 2 · estimate - perc reversed,
    basic0 = perc - bias (the one to report after a smoothed bootstrap)."""
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be between 0 and 1, got {conf!r}")
    bt = np.asarray(bootstraps, dtype=float).ravel()
    bt = bt[np.isfinite(bt)]
    if bt.size < 2:
        return {m: (math.nan, math.nan) for m in CI_METHODS}
    bias = float(bt.mean()) - estimate
    merr = float(bt.std(ddof=1)) * float(norm.ppf((1.0 + conf) / 2.0))
    perc = _quantile_interpolated(bt, conf)
    return {
        "norm": (estimate - bias - merr, estimate - bias + merr),
        "norm0": (estimate - merr, estimate + merr),
        "basic": (2.0 * estimate - perc[1], 2.0 * estimate - perc[0]),
        "basic0": (perc[0] - bias, perc[1] - bias),
        "perc": perc,
    }


def _resample_probabilities(times_rad: np.ndarray, *, kmax: int) -> np.ndarray:
    """The chance of each point of overlap's resampling grid (512 points on [0, 2π], midnight once): the fitted
    kernel density there (bandwidth unadjusted), scaled to sum to 1. Rejection sampling as resample() does it
    draws exactly these."""
    grid = np.linspace(0.0, TWO_PI, RESAMPLE_GRID)[:-1]
    d = _density(_Sample.of(times_rad), grid, bandwidth(times_rad, kmax=kmax))
    return d / d.sum()


def bootstrap_overlap(a: ActivityFit | Iterable[float] | np.ndarray, b: ActivityFit | Iterable[float] | np.ndarray,
                      *, n_resamples: int, seed: int | None = None, kmax: int = 3,
                      adjust: float | Sequence[float | None] = DEFAULT_ADJUST, n_grid: int = DEFAULT_GRID
                      ) -> np.ndarray:
    """Smoothed bootstrap of the overlap estimators, as overlap's ``resample(smooth = TRUE)`` then ``bootEst``:
    ``n_resamples`` x 3 estimates (Dhat1, Dhat4, Dhat5; NaN where skipped or where a resample has no bandwidth).

    Each resample draws as many times as each sample has from its fitted kernel density on overlap's 512-point
    grid; ``seed`` makes the draws repeatable (numpy's generator, so not R's numbers)."""
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples!r}")
    xa, xb = _times_of(a, "A"), _times_of(b, "B")
    adj = _adjustments(adjust)
    rng = np.random.default_rng(seed)
    resample_grid = _Powers(np.linspace(0.0, TWO_PI, RESAMPLE_GRID)[:-1])
    estimate_grid = _Powers(np.linspace(0.0, TWO_PI, n_grid))
    pa, pb = _resample_probabilities(xa, kmax=kmax), _resample_probabilities(xb, kmax=kmax)
    out = np.empty((n_resamples, 3))
    # the products are small (a few hundred orders by 512 points): one BLAS thread is faster than several, and
    # many times faster when other work shares the cores
    with threadpool_limits(limits=1, user_api="blas"):
        for r in range(n_resamples):
            # the counts of n draws over the grid points: the same resample as n draws, taken in one step
            sa = _Sample.on_grid(resample_grid, rng.multinomial(xa.size, pa))
            sb = _Sample.on_grid(resample_grid, rng.multinomial(xb.size, pb))
            out[r] = _estimates(sa, sb, kmax=kmax, adjust=adj, n_grid=n_grid, grid_powers=estimate_grid)
    return out


@dataclass(frozen=True)
class BootstrapSummary:
    """One estimator's smoothed bootstrap: how many resamples gave an estimate, their mean, bias and spread, and
    the five intervals of :func:`boot_ci` (``interval`` is basic0, overlap's recommendation)."""

    n_resamples: int
    mean: float
    bias: float
    sd: float
    intervals: Mapping[str, tuple[float, float]]

    @property
    def interval(self) -> tuple[float, float]:
        return self.intervals["basic0"]


@dataclass(frozen=True)
class OverlapResult:
    """The coefficient of overlapping of two activity patterns, three ways, with a smoothed-bootstrap interval
    for each when asked. ``recommended`` is Dhat4 when the smaller sample has more than 75 times, else Dhat1
    (Meredith & Ridout's advice)."""

    n_a: int
    n_b: int
    bandwidth_a: float
    bandwidth_b: float
    estimates: Mapping[str, float]
    recommended: str
    conf: float
    bootstrap: Mapping[str, BootstrapSummary] | None = None
    seed: int | None = None

    @property
    def dhat1(self) -> float:
        return self.estimates["Dhat1"]

    @property
    def dhat4(self) -> float:
        return self.estimates["Dhat4"]

    @property
    def dhat5(self) -> float:
        return self.estimates["Dhat5"]

    def interval(self, estimator: str | None = None) -> tuple[float, float] | None:
        """The basic0 interval of ``estimator`` (default: the recommended one); None without a bootstrap."""
        if self.bootstrap is None:
            return None
        return self.bootstrap[estimator or self.recommended].interval

    def as_dict(self) -> dict[str, object]:
        """Plain numbers for JSON (None where a figure is not a number): the estimates, the recommended one, and per
        estimator the bootstrap's mean, bias, sd and intervals, ``ci_low``/``ci_high`` being basic0."""
        out: dict[str, object] = {
            "n_a": self.n_a, "n_b": self.n_b, "bandwidth_a": _plain(self.bandwidth_a),
            "bandwidth_b": _plain(self.bandwidth_b), **{k: _plain(v) for k, v in self.estimates.items()},
            "recommended": self.recommended, "conf": self.conf, "seed": self.seed, "bootstrap": None}
        if self.bootstrap is not None:
            out["bootstrap"] = {name: {
                "n_resamples": b.n_resamples, "mean": _plain(b.mean), "bias": _plain(b.bias), "sd": _plain(b.sd),
                "ci_method": "basic0", "ci_low": _plain(b.interval[0]), "ci_high": _plain(b.interval[1]),
                "intervals": {m: [_plain(lo), _plain(hi)] for m, (lo, hi) in b.intervals.items()},
            } for name, b in self.bootstrap.items()}
        return out


def _plain(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def overlap(a: ActivityFit | Iterable[float] | np.ndarray, b: ActivityFit | Iterable[float] | np.ndarray, *,
            bootstrap: int = 0, seed: int | None = None, conf: float = 0.95, kmax: int = 3,
            adjust: float | Sequence[float | None] = DEFAULT_ADJUST, n_grid: int = DEFAULT_GRID,
            labels: tuple[str, str] = ("A", "B")) -> OverlapResult:
    """The overlap of two groups' activity (times in radians, one per independent event, or their fits, whose
    times are used with each estimator's own adjustment): Δ̂₁, Δ̂₄ and Δ̂₅ as overlapEst gives them and, with
    ``bootstrap`` > 0 resamples, each one's smoothed-bootstrap intervals at level ``conf`` (basic0 the one to
    report; overlap's authors advise 1,000 resamples or more).

    Each sample is refused with words naming it (``labels``) when it has fewer than :data:`MIN_DETECTIONS` times
    or a time outside [0, 2π)."""
    if not 0.0 < conf < 1.0:
        raise ValueError(f"conf must be between 0 and 1 (0.95 for a 95 % interval), got {conf!r}")
    if bootstrap < 0:
        raise ValueError(f"bootstrap is a number of resamples (0 for none), got {bootstrap!r}")
    fewest = _fewest_resamples(conf)
    if 0 < bootstrap < fewest:
        raise ValueError(f"a {conf:.0%} interval needs at least {fewest} bootstrap resamples, got {bootstrap}; "
                         f"overlap's authors advise 1,000 or more")
    xa, xb = _times_of(a, labels[0]), _times_of(b, labels[1])
    bw_a = bandwidth(xa, kmax=kmax)
    bw_b = bandwidth(xb, kmax=kmax)
    est = overlap_estimates(xa, xb, kmax=kmax, adjust=adjust, n_grid=n_grid)
    recommended = "Dhat4" if min(xa.size, xb.size) > 75 else "Dhat1"
    summaries = None
    if bootstrap:
        bt = bootstrap_overlap(xa, xb, n_resamples=bootstrap, seed=seed, kmax=kmax, adjust=adjust, n_grid=n_grid)
        summaries = {}
        for j, name in enumerate(ESTIMATORS):
            if math.isnan(est[name]):
                continue
            col = bt[:, j][np.isfinite(bt[:, j])]
            summaries[name] = BootstrapSummary(
                n_resamples=int(col.size), mean=float(col.mean()) if col.size else math.nan,
                bias=float(col.mean()) - est[name] if col.size else math.nan,
                sd=float(col.std(ddof=1)) if col.size > 1 else math.nan,
                intervals=boot_ci(est[name], col, conf=conf))
    return OverlapResult(n_a=int(xa.size), n_b=int(xb.size), bandwidth_a=bw_a, bandwidth_b=bw_b, estimates=est,
                         recommended=recommended, conf=conf, bootstrap=summaries, seed=seed)


# --------------------------------------------------------------------------- camtrapR record table


@dataclass(frozen=True, eq=False)
class RecordTimes:
    """The detections of a camtrapR record table: species, individual (empty when the table has none) and station
    of each row, its local date-time and clock time in radians."""

    species: tuple[str, ...]
    individuals: tuple[str, ...]
    stations: tuple[str, ...]
    when: tuple[datetime, ...]
    times_rad: np.ndarray

    def of_species(self, species: str) -> np.ndarray:
        """The radians of the rows of ``species`` (refused, naming the species there are, when it has none)."""
        mask = np.array([s == species for s in self.species], dtype=bool)
        if not mask.any():
            known = ", ".join(sorted(set(self.species))) or "none"
            raise ValueError(f"the record table has no detection of {species!r} (species in it: {known})")
        return self.times_rad[mask]

    def independent(self, *, min_minutes: float, by_individual: bool = False) -> RecordTimes:
        """The rows that are independent detections, as camtrapR's ``minDeltaTime`` with ``deltaTimeComparedTo =
        "lastIndependentRecord"`` keeps them: a row is kept when it comes at least ``min_minutes`` after the last
        kept row of the same species at the same station (and of the same individual with ``by_individual``).

        A record table has a row per photo; an activity curve wants a time per event, so thin it first."""
        if not min_minutes >= 0:
            raise ValueError(f"min_minutes must be a number of minutes, 0 or more, got {min_minutes!r}")
        keys = [(self.stations[i], self.species[i], self.individuals[i] if by_individual else "")
                for i in range(len(self.species))]
        last_kept: dict[tuple[str, str, str], datetime] = {}
        kept = []
        for i in sorted(range(len(keys)), key=lambda i: (keys[i], self.when[i])):
            previous = last_kept.get(keys[i])
            if previous is None or (self.when[i] - previous).total_seconds() >= min_minutes * 60.0:
                last_kept[keys[i]] = self.when[i]
                kept.append(i)
        kept.sort()  # the table's own order
        return RecordTimes(species=tuple(self.species[i] for i in kept),
                           individuals=tuple(self.individuals[i] for i in kept),
                           stations=tuple(self.stations[i] for i in kept), when=tuple(self.when[i] for i in kept),
                           times_rad=self.times_rad[kept])


_DATE_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y:%m:%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S",
                      "%Y/%m/%d %H:%M:%S", "%Y-%m-%d %H:%M:%S.%f")
_DATE_FORMATS = ("%Y-%m-%d", "%Y:%m:%d", "%Y/%m/%d")
_TIME_FORMATS = ("%H:%M:%S", "%H:%M", "%H:%M:%S.%f")


def _parse(text: str, formats: Sequence[str]) -> datetime | None:
    for fmt in formats:
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def parse_record_table(text: str, *, source: str = "the record table") -> RecordTimes:
    """The detections of a camtrapR record table given as CSV text: ``Species`` and ``DateTimeOriginal``
    (``YYYY-MM-DD HH:MM:SS``, as camtrapR and ``rosette export capthist`` write it), or ``Species``, ``Date`` and
    ``Time``. Rows whose species is empty or whose date-time cannot be read are refused together, each named by
    its line and value, so nothing is fitted to part of a table."""
    reader = csv.DictReader(io.StringIO(text.lstrip("\ufeff")))
    columns = {c.strip() for c in reader.fieldnames or ()}
    by_name = {c.strip(): c for c in reader.fieldnames or ()}
    if "Species" not in columns or not ("DateTimeOriginal" in columns or {"Date", "Time"} <= columns):
        raise ValueError(f"{source}: needs the columns Species and DateTimeOriginal (or Species, Date and Time), as "
                         f"camtrapR's recordTable writes them; found {', '.join(sorted(columns)) or 'no header'}")
    species, individuals, stations, when, problems = [], [], [], [], []
    for row in reader:
        line = reader.line_num

        def cell(name: str, row: dict[str, str | None] = row) -> str:
            return (row.get(by_name.get(name, name)) or "").strip()

        sp = cell("Species")
        if "DateTimeOriginal" in columns and cell("DateTimeOriginal"):
            stamp = _parse(cell("DateTimeOriginal"), _DATE_TIME_FORMATS)
            shown = f"DateTimeOriginal {cell('DateTimeOriginal')!r}"
        else:
            day, clock = _parse(cell("Date"), _DATE_FORMATS), _parse(cell("Time"), _TIME_FORMATS)
            stamp = datetime.combine(day.date(), clock.time()) if day and clock else None
            shown = f"Date {cell('Date')!r} and Time {cell('Time')!r}"
        if not sp:
            problems.append(f"line {line}: no Species")
        elif stamp is None:
            problems.append(f"line {line}: cannot read {shown} (write YYYY-MM-DD HH:MM:SS)")
        else:
            species.append(sp)
            individuals.append(cell("Individual"))
            stations.append(cell("Station"))
            when.append(stamp)
    if problems:
        shown = "; ".join(problems[:10]) + (f"; and {len(problems) - 10} more" if len(problems) > 10 else "")
        raise ValueError(f"{source}: {len(problems)} row(s) cannot be read: {shown}. Correct them or remove them "
                         f"and read the table again")
    return RecordTimes(species=tuple(species), individuals=tuple(individuals), stations=tuple(stations),
                       when=tuple(when), times_rad=times_to_radians(when))


def read_record_table(path: str | Path) -> RecordTimes:
    """:func:`parse_record_table` of the CSV file at ``path`` (UTF-8, a byte-order mark allowed)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; save the record table as CSV (UTF-8)") from None
    return parse_record_table(text, source=str(path))
