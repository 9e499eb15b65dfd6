"""Density from spatial capture-recapture, fitted by maximum likelihood as secr fits it.

:func:`fit_density` is the one entry point: captures and detectors in, a :class:`DensityFit` out (D per hectare,
km^2 and 100 km^2, g0 or lambda0, sigma, each with its SE and 95% CI; N in the mask; log-likelihood, AIC, AICc;
what was used; the buffer check). The likelihood is in :mod:`core.field.scr_likelihood`.

The full and conditional likelihoods (secr's default and ``CL = TRUE``), the link scales, SEs and intervals, and the
buffer check (a fit again with twice the buffer; D changing by more than 1% says it was too narrow):
docs/density.md. Two steps go beyond secr's ``secr.fit``: a fit the array cannot carry is refused before any figure
leaves here (:mod:`core.field.scr_identifiability`), and a default buffer is widened by itself to the one
:func:`suggest_buffer` gives (secr's ``suggest.buffer``) and the model refitted until D is stable."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import norm
from threadpoolctl import threadpool_limits

from core.field.capthist import Trap
from core.field.scr_data import Capture, CaptureHistory, build_capture_history
from core.field import scr_identifiability as idf
from core.field.scr_errors import FitNotConverged, MaskError
from core.field.scr_likelihood import (
    DETECTION_FUNCTIONS,
    ScrModel,
    detection_hazard,
    detection_probability,
    link_parameters,
    log_likelihood,
    pdot_and_hazard,
    prepare,
    real_parameters,
)
from core.field.scr_mask import (
    Mask,
    check_mask_near_detectors,
    nearest_detector_distance,
    read_geojson_polygon,
    read_mask_csv,
    summarise_spacing,
    trapbuffer_mask,
)

Z95 = float(norm.ppf(0.975))
#: A relative change of D above this between the buffer and twice the buffer flags the buffer as too narrow.
BUFFER_TOLERANCE = 0.01
#: The relative bias of D from truncating the habitat that :func:`suggest_buffer` accepts (secr's ``RBtarget``).
SUGGEST_RB_TARGET = 0.001
#: How many times the buffer is widened by itself before the fit is shown with its failed buffer check.
MAX_WIDENINGS = 3
_SUGGEST_REACH, _SUGGEST_REACH_EX = 8.0, 30.0  # sigmas beyond which p. is below 1e-12 (half-normal, exponential)
_SUGGEST_POINTS = 120
_MAX_STEP = 4.0  # grid points across the area that suggest_buffer integrates over
#: Largest gradient (log-likelihood units per link unit) accepted at a maximum.
GRADIENT_TOLERANCE = 1e-3
_STEP = 1e-5  # central-difference step for gradients, on the link scale
_HESSIAN_STEP = 1e-4


@dataclass(frozen=True)
class Estimate:
    """A real parameter with its standard error and 95% confidence limits (NaN when not estimable)."""

    value: float
    se: float
    lcl: float
    ucl: float

    def __post_init__(self) -> None:  # plain floats, so that the fit serialises as JSON as it is
        for name in ("value", "se", "lcl", "ucl"):
            object.__setattr__(self, name, float(getattr(self, name)))

    def scaled(self, factor: float) -> Estimate:
        return Estimate(self.value * factor, self.se * factor, self.lcl * factor, self.ucl * factor)

    def as_dict(self) -> dict[str, float | None]:
        return {k: (None if not math.isfinite(v) else v)
                for k, v in (("estimate", self.value), ("se", self.se), ("lcl", self.lcl), ("ucl", self.ucl))}


@dataclass(frozen=True)
class MaskSummary:
    points: int
    spacing_m: float
    buffer_m: float | None
    area_km2: float
    source: str


@dataclass(frozen=True)
class BufferCheck:
    """D at two buffers and whether it moved by more than :data:`BUFFER_TOLERANCE`: the buffer used and twice it
    (``widened`` False), or, where the buffer was widened by itself, the buffer before the last widening
    (``buffer_m``) and the one used (``doubled_buffer_m``); ``widened_from_m`` lists every buffer left behind."""

    buffer_m: float
    doubled_buffer_m: float
    density_per_ha: float
    doubled_density_per_ha: float
    relative_change: float
    changed: bool
    widened: bool = False
    widened_from_m: tuple[float, ...] = ()

    @property
    def message(self) -> str:
        pct = 100 * self.relative_change
        if self.widened:
            steps = " m, ".join(f"{b:g}" for b in self.widened_from_m)
            if self.changed:
                return (f"buffer check failed: D still changes by {pct:+.1f}% when the buffer is widened from "
                        f"{self.buffer_m:g} m to {self.doubled_buffer_m:g} m (widened from {steps} m): D is not "
                        "stable in the buffer; give a habitat mask or a wider buffer")
            return (f"buffer widened from {steps} m to {self.doubled_buffer_m:g} m, where D changes by {pct:+.2f}% "
                    f"from the buffer of {self.buffer_m:g} m (under 1%)")
        if self.changed:
            return (f"buffer check failed: D changes by {pct:+.1f}% when the buffer is doubled to "
                    f"{self.doubled_buffer_m:g} m: the buffer of {self.buffer_m:g} m is too narrow; fit again with a "
                    "wider buffer")
        return f"D changes by {pct:+.2f}% when the buffer is doubled to {self.doubled_buffer_m:g} m (under 1%)"

    @property
    def used_buffer_m(self) -> float:
        return self.doubled_buffer_m if self.widened else self.buffer_m


@dataclass(frozen=True, eq=False)
class DensityFit:
    """A fitted SCR model (see the module's docstring). Densities are animals per hectare unless named."""

    detector: str
    detectfn: str
    conditional: bool
    density_per_ha: Estimate
    detection: Estimate  # g0 (HN, EX) or lambda0 (HHN) at one unit of usage
    sigma_m: Estimate
    n_in_mask: Estimate
    esa_ha: float  # effective sampled area, p. x mask area
    pdot: float
    loglik: float
    aic: float
    aicc: float
    n_parameters: int
    n_animals: int
    n_detections: int
    n_occasions: int
    n_detectors: int
    detector_spacing_m: float
    mask: MaskSummary
    link_estimates: tuple[float, ...]
    link_names: tuple[str, ...]
    link_vcv: np.ndarray
    starts_tried: tuple[dict[str, float], ...]
    buffer_check: BufferCheck | None = None
    notes: tuple[str, ...] = ()
    mask_points: np.ndarray = field(default=None, repr=False)  # (M, 2) metres, for maps
    history: CaptureHistory | None = field(default=None, repr=False)

    @property
    def detection_name(self) -> str:
        return "lambda0" if self.detectfn == "HHN" else "g0"

    @property
    def density_per_km2(self) -> Estimate:
        return self.density_per_ha.scaled(100.0)

    @property
    def density_per_100km2(self) -> Estimate:
        return self.density_per_ha.scaled(10_000.0)

    def detection_curve(self, distance_m: Sequence[float] | np.ndarray) -> np.ndarray:
        """Probability of detection in one unit of usage (one occasion of full use) at each distance."""
        return detection_probability(self.detectfn, self.detection.value, self.sigma_m.value, np.asarray(distance_m))

    def as_dict(self) -> dict[str, object]:
        """The fit as plain values (a JSON document), the keys ``rosette density --json`` promises."""
        d100 = self.density_per_100km2

        def clean(v: float) -> float | None:
            return v if math.isfinite(v) else None

        out: dict[str, object] = {
            "detector": self.detector, "detectfn": self.detectfn,
            "likelihood": "conditional" if self.conditional else "full",
            "D_per_ha": clean(self.density_per_ha.value), "D_per_km2": clean(self.density_per_km2.value),
            "D_per_100km2": clean(d100.value), "D_se_per_100km2": clean(d100.se),
            "ci_low": clean(d100.lcl), "ci_high": clean(d100.ucl),
            self.detection_name: clean(self.detection.value),
            f"{self.detection_name}_se": clean(self.detection.se),
            f"{self.detection_name}_ci": [clean(self.detection.lcl), clean(self.detection.ucl)],
            "sigma_m": clean(self.sigma_m.value), "sigma_se_m": clean(self.sigma_m.se),
            "sigma_ci_m": [clean(self.sigma_m.lcl), clean(self.sigma_m.ucl)],
            "N_in_mask": self.n_in_mask.as_dict(), "esa_km2": self.esa_ha / 100.0, "pdot": self.pdot,
            "loglik": self.loglik, "AIC": self.aic, "AICc": clean(self.aicc), "n_parameters": self.n_parameters,
            "n_animals": self.n_animals, "n_detections": self.n_detections, "n_occasions": self.n_occasions,
            "n_detectors": self.n_detectors, "detector_spacing_m": self.detector_spacing_m,
            "mask": {"points": self.mask.points, "spacing_m": self.mask.spacing_m, "buffer_m": self.mask.buffer_m,
                     "area_km2": self.mask.area_km2, "source": self.mask.source},
            "buffer_check": None if self.buffer_check is None else {
                "buffer_m": self.buffer_check.buffer_m, "doubled_buffer_m": self.buffer_check.doubled_buffer_m,
                "D_per_100km2": self.buffer_check.density_per_ha * 10_000,
                "D_doubled_per_100km2": self.buffer_check.doubled_density_per_ha * 10_000,
                "relative_change": self.buffer_check.relative_change, "changed": self.buffer_check.changed,
                "widened": self.buffer_check.widened, "widened_from_m": list(self.buffer_check.widened_from_m),
                "message": self.buffer_check.message},
            "notes": list(self.notes),
        }
        return out


# --------------------------------------------------------------------------- numerics


def numerical_gradient(fn, x: np.ndarray, *, step: float = _STEP) -> np.ndarray:
    grad = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = step
        grad[i] = (fn(x + e) - fn(x - e)) / (2 * step)
    return grad


def numerical_hessian(fn, x: np.ndarray, *, step: float = _HESSIAN_STEP) -> np.ndarray:
    """Central second differences of ``fn`` at ``x``."""
    n = x.size
    f0 = fn(x)
    hess = np.empty((n, n))
    for i in range(n):
        ei = np.zeros(n)
        ei[i] = step
        hess[i, i] = (fn(x + ei) - 2 * f0 + fn(x - ei)) / step ** 2
        for j in range(i):
            ej = np.zeros(n)
            ej[j] = step
            value = (fn(x + ei + ej) - fn(x + ei - ej) - fn(x - ei + ej) + fn(x - ei - ej)) / (4 * step ** 2)
            hess[i, j] = hess[j, i] = value
    return hess


def root_pooled_spatial_variance(history: CaptureHistory) -> float:
    """Root pooled spatial variance of each animal's detections, as secr's RPSV: a start for sigma."""
    ss, df = 0.0, 0
    per_animal = history.counts.sum(axis=1)  # (n, K)
    for row in per_animal:
        idx = np.repeat(np.arange(row.size), row)
        if idx.size < 2:
            continue
        pts = history.xy[idx]
        ss += float(((pts - pts.mean(axis=0)) ** 2).sum())
        df += idx.size - 1
    return math.sqrt(ss / df / 2) if df and ss > 0 else 0.0


def _negative(model: ScrModel):
    def fn(beta: np.ndarray) -> float:
        value = log_likelihood(model, beta)
        return -value if math.isfinite(value) else 1e10
    return fn


def start_values(model: ScrModel) -> list[dict[str, float]]:
    """Starts ranked by the conditional likelihood over a small grid of (g0 | lambda0, sigma) around the RPSV, D
    from p. at each (n / p. A); the best first."""
    history = model.history
    spacing = summarise_spacing(history.xy)
    rpsv = root_pooled_spatial_variance(history) or spacing / 2
    cl_model = prepare_like(model, conditional=True)
    candidates = []
    for sigma in (rpsv * f for f in (0.6, 0.9, 1.3, 2.0)):
        for first in (0.02, 0.08, 0.25, 0.6):
            real = {model.first_name: first, "sigma": sigma}
            value = log_likelihood(cl_model, link_parameters(cl_model, real))
            if math.isfinite(value):
                pdot = pdot_and_hazard(model, first, sigma)[0]
                real["D"] = history.n_animals / (pdot * model.mask.area_ha)
                candidates.append((value, real))
    candidates.sort(key=lambda c: -c[0])
    return [c[1] for c in candidates]


def prepare_like(model: ScrModel, *, conditional: bool) -> ScrModel:
    if model.conditional == conditional:
        return model
    return prepare(model.history, model.mask, detectfn=model.detectfn, conditional=conditional)


def _maximise(model: ScrModel, start: np.ndarray) -> tuple[np.ndarray, float, bool]:
    """BFGS on the link scale, then Newton steps on the numerical Hessian to settle at the maximum."""
    fn = _negative(model)
    result = minimize(fn, start, jac=lambda b: numerical_gradient(fn, b), method="BFGS",
                      options={"gtol": 1e-6, "maxiter": 400})
    beta = np.asarray(result.x, dtype=float)
    best = fn(beta)
    for _ in range(3):
        grad = numerical_gradient(fn, beta)
        if np.max(np.abs(grad)) < 1e-7:
            break
        hess = numerical_hessian(fn, beta)
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)) or np.max(np.abs(step)) > 0.5:
            break
        trial = beta - step
        value = fn(trial)
        if value <= best:
            beta, best = trial, value
        else:
            break
    grad = numerical_gradient(fn, beta)
    converged = best < 1e9 and bool(np.max(np.abs(grad)) < GRADIENT_TOLERANCE)
    return beta, -best, converged


def _exp(v: float) -> float:
    """exp() that gives inf instead of an OverflowError (an interval of an unmeasured sigma reaches e^1000)."""
    with np.errstate(over="ignore"):
        return float(np.exp(v))


def _expit(v: float) -> float:
    return float(expit(v))


def _wald(value_link: float, se_link: float, inverse) -> Estimate:
    lo, hi = value_link - Z95 * se_link, value_link + Z95 * se_link
    return Estimate(float(inverse(value_link)), math.nan, float(inverse(lo)), float(inverse(hi)))


def _lognormal(value: float, se: float) -> Estimate:
    """secr's log-normal interval (``add.cl`` with ``loginterval = TRUE``)."""
    if not (math.isfinite(se) and value > 0):
        return Estimate(value, se, math.nan, math.nan)
    c = _exp(Z95 * math.sqrt(math.log1p(min((se / value) ** 2, 1e300))))
    return Estimate(value, se, value / c, value * c)


def _fmt_start(real: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in real.items())


# --------------------------------------------------------------------------- the fit


def fit_model(model: ScrModel, *, starts: Iterable[dict[str, float]] | None = None, max_starts: int = 3) -> DensityFit:
    """Maximise the likelihood of a prepared model from up to ``max_starts`` starts; raise
    :class:`FitNotConverged` naming them when none reaches a maximum."""
    # the products are small (animals x detectors x mask points): one BLAS thread is faster than several, and
    # much faster when other work shares the cores
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit_model(model, starts=starts, max_starts=max_starts)


def _fit_model(model: ScrModel, *, starts: Iterable[dict[str, float]] | None, max_starts: int) -> DensityFit:
    history, mask = model.history, model.mask
    starts = list(starts) if starts is not None else start_values(model)
    if not starts:
        raise FitNotConverged("the likelihood cannot be evaluated at any start value; check the mask and the "
                              "detectors' coordinates", starts=())
    tried: list[dict[str, float]] = []
    found = None
    best_reached: tuple[float, np.ndarray] | None = None
    for real in starts[:max_starts]:
        real = {k: v for k, v in real.items() if not (model.conditional and k == "D")}
        tried.append({k: float(v) for k, v in real.items()})
        beta, loglik, converged = _maximise(model, link_parameters(model, real))
        if converged:
            found = (beta, loglik)
            break
        if best_reached is None or loglik > best_reached[0]:
            best_reached = (loglik, beta)
    if found is None:
        raise FitNotConverged(
            "the fit did not converge from any start (" + "; ".join(_fmt_start(r) for r in tried) + "); the data "
            "may hold too few recaptures at different detectors, or the buffer or mask may not suit them",
            starts=tried, reached=real_parameters(model, best_reached[1]) if best_reached else None)
    beta, loglik = found
    notes: list[str] = []
    fn = _negative(model)
    hess = numerical_hessian(fn, beta)
    try:
        vcv = np.linalg.inv(hess)
        if not np.all(np.isfinite(vcv)) or np.any(np.diag(vcv) <= 0):
            raise np.linalg.LinAlgError
    except np.linalg.LinAlgError:
        vcv = np.full_like(hess, np.nan)
        notes.append("the Hessian is not positive definite: standard errors and intervals are not available")
    se = np.sqrt(np.where(np.diag(vcv) > 0, np.diag(vcv), np.nan))
    real = real_parameters(model, beta)
    first, sigma = real[model.first_name], real["sigma"]
    offset = 0 if model.conditional else 1
    if model.detectfn == "HHN":
        detection = _wald(beta[offset], se[offset], _exp)
        detection = Estimate(first, first * se[offset], detection.lcl, detection.ucl)
    else:
        detection = _wald(beta[offset], se[offset], _expit)
        detection = Estimate(first, first * (1 - first) * se[offset], detection.lcl, detection.ucl)
    sigma_est = _wald(beta[offset + 1], se[offset + 1], _exp)
    sigma_est = Estimate(sigma, sigma * se[offset + 1], sigma_est.lcl, sigma_est.ucl)
    pdot = pdot_and_hazard(model, first, sigma)[0]
    esa = pdot * mask.area_ha
    n = history.n_animals
    if model.conditional:
        density_value = n / esa

        def derived_density(b: np.ndarray) -> float:
            r = real_parameters(model, b)
            return n / (pdot_and_hazard(model, r[model.first_name], r["sigma"])[0] * mask.area_ha)

        grad = numerical_gradient(derived_density, beta)
        variance = n / esa ** 2 + float(grad @ vcv @ grad)
        density = _lognormal(density_value, math.sqrt(variance) if variance > 0 else math.nan)
    else:
        d = _wald(beta[0], se[0], _exp)
        density = Estimate(real["D"], real["D"] * se[0], d.lcl, d.ucl)
    k = model.n_parameters
    aicc = -2 * loglik + 2 * k + (2 * k * (k + 1) / (n - k - 1) if n - k - 1 > 0 else math.nan)
    if model.detectfn != "HHN" and first > 0.99:
        notes.append("g0 is at its upper limit of 1: detection may be saturating")
    return DensityFit(
        detector=history.detector_type, detectfn=model.detectfn, conditional=model.conditional,
        density_per_ha=density, detection=detection, sigma_m=sigma_est,
        n_in_mask=density.scaled(mask.area_ha), esa_ha=esa, pdot=pdot, loglik=loglik,
        aic=-2 * loglik + 2 * k, aicc=aicc, n_parameters=k, n_animals=n, n_detections=history.n_detections,
        n_occasions=history.n_occasions, n_detectors=len(history.detectors),
        detector_spacing_m=summarise_spacing(history.xy),
        mask=MaskSummary(points=mask.n_points, spacing_m=mask.spacing_m, buffer_m=mask.buffer_m,
                         area_km2=mask.area_km2, source=mask.source),
        link_estimates=tuple(float(b) for b in beta),
        link_names=(() if model.conditional else ("log D",))
        + ((f"log {model.first_name}",) if model.detectfn == "HHN" else ("logit g0",)) + ("log sigma",),
        link_vcv=vcv, starts_tried=tuple(tried), notes=tuple(notes), mask_points=mask.xy, history=history)


def _habitat_mask(history: CaptureHistory, *, buffer_m: float, spacing_m: float | None,
                  mask: Mask | str | Path | None) -> Mask:
    if isinstance(mask, Mask):
        return mask
    if mask is None:
        return trapbuffer_mask(history.xy, buffer_m=buffer_m, spacing_m=spacing_m)
    path = Path(mask)
    if path.suffix.lower() in (".geojson", ".json"):
        return trapbuffer_mask(history.xy, buffer_m=buffer_m, spacing_m=spacing_m,
                               polygon=read_geojson_polygon(path))
    if path.suffix.lower() in (".csv", ".txt"):
        return read_mask_csv(path, spacing_m=spacing_m)
    raise MaskError(f"mask file {path.name!r}: give a CSV of x,y points or a GeoJSON polygon (.csv, .geojson)")


def fit_density(captures: Iterable[Capture | Sequence], traps: Sequence[Trap], *, detector: str,
                detectfn: str = "HN", buffer_m: float, spacing_m: float | None = None,
                mask: Mask | str | Path | None = None, conditional: bool = False, session: str | None = None,
                check_buffer: bool = True, widen_buffer: bool = False, check_identifiable: bool = True,
                progress: Callable[[float, str], None] | None = None) -> DensityFit:
    """Fit density from captures (``Session ID Occasion Detector`` rows or :class:`Capture`) at ``traps``
    (:class:`core.field.capthist.Trap`: name, x and y in metres, usage per occasion).

    ``mask``: None builds secr's trapbuffer mask (``buffer_m``, and ``spacing_m`` or 64 points across); a GeoJSON
    polygon (path) clips that mask to the habitat; a CSV of x,y points (path) or a :class:`Mask` is used as it is.
    With ``check_buffer`` the fit is repeated with twice the buffer (masks built here only). With ``widen_buffer``
    the buffer is first widened to the one :func:`suggest_buffer` gives and the model refitted, until D changes by
    under :data:`BUFFER_TOLERANCE` (at most :data:`MAX_WIDENINGS` times). ``check_identifiable``: a history or
    fit the array cannot carry raises :class:`core.field.scr_identifiability.NotIdentifiable` with one sentence
    (the module's checks), as does a fit that overflows. ``progress`` hears (fraction done, what is being done)."""
    report = progress or (lambda fraction, message: None)
    if detectfn not in DETECTION_FUNCTIONS:
        raise ValueError(f"detection function {detectfn!r} unknown; use one of {', '.join(DETECTION_FUNCTIONS)}")
    if not (isinstance(buffer_m, (int, float)) and math.isfinite(buffer_m)) or buffer_m <= 0:
        raise MaskError(f"the buffer must be more than 0 m (got {buffer_m}); give about 4 times the expected "
                        "sigma, the distance over which an animal is detected")
    report(0.0, "reading the captures and detectors")
    history = build_capture_history(captures, traps, detector_type=detector, session=session)
    report(0.05, "building the habitat mask")
    habitat = _habitat_mask(history, buffer_m=buffer_m, spacing_m=spacing_m, mask=mask)
    check_mask_near_detectors(habitat, history.xy, near_m=buffer_m)
    shape = idf.array_shape(history.xy)
    if check_identifiable:
        idf.check_history(history.counts, shape)
    built_here = habitat.source != "csv"
    polygon = mask if habitat.source == "polygon" else None

    def fit_on(habitat_mask: Mask, start: dict[str, float] | None) -> DensityFit:
        model = prepare(history, habitat_mask, detectfn=detectfn, conditional=conditional)
        try:
            try:
                if start is None:
                    raise FitNotConverged("no start given")
                return fit_model(model, starts=[start])  # the previous fit's estimates are almost always good
            except FitNotConverged:
                return fit_model(model)
        except FitNotConverged as exc:
            sigma = (exc.reached or {}).get("sigma", math.nan)
            if check_identifiable and math.isfinite(sigma) and sigma > idf.SIGMA_EXTENT_FACTOR * shape.extent_m:
                raise idf.refusal("sigma_beyond_array", shape) from None
            raise
        except (OverflowError, FloatingPointError):
            if not check_identifiable:
                raise
            raise idf.refusal("sigma_beyond_array", shape) from None

    def assessed(fit: DensityFit) -> DensityFit:
        if check_identifiable:
            criterion = assess_fit(fit, shape)
            if criterion is not None:
                raise idf.refusal(criterion, shape)
        return fit

    report(0.1, f"fitting {history.n_animals} animals on {habitat.n_points} mask points")
    fit = assessed(fit_on(habitat, None))
    used = float(buffer_m)
    tried: list[float] = []
    previous: DensityFit | None = None
    if widen_buffer and built_here:
        for step in range(MAX_WIDENINGS):
            wider = suggest_buffer(history, detectfn=detectfn, first=fit.detection.value, sigma=fit.sigma_m.value)
            if not wider > used * (1 + 1e-6):
                break
            # at most 4 times wider a step: a fit far from the truth suggests far too much, the refit corrects it
            wider = float(math.ceil(min(wider, _MAX_STEP * used) / 10.0) * 10.0)
            report(0.1 + 0.1 * (step + 1), f"widening the buffer from {used:g} m to {wider:g} m, as secr's "
                                            "suggest.buffer does, and fitting again")
            # from secr's starts, not the narrower fit's estimates: the fit is then the one that buffer given by
            # hand gives, to the last digit
            wide = assessed(fit_on(_habitat_mask(history, buffer_m=wider, spacing_m=spacing_m, mask=polygon), None))
            tried.append(used)
            previous, fit, used = fit, wide, wider
            if abs(_change(previous, fit)) <= BUFFER_TOLERANCE:
                break
    if previous is not None:
        report(1.0, "done")
        change = _change(previous, fit)
        check = BufferCheck(buffer_m=tried[-1], doubled_buffer_m=used, density_per_ha=previous.density_per_ha.value,
                            doubled_density_per_ha=fit.density_per_ha.value, relative_change=float(change),
                            changed=bool(abs(change) > BUFFER_TOLERANCE), widened=True, widened_from_m=tuple(tried))
        return replace(fit, buffer_check=check, notes=fit.notes + (check.message,))
    if not (check_buffer and built_here):
        report(1.0, "done")
        if habitat.source == "csv" and check_buffer:
            return _with_note(fit, "buffer check skipped: the mask was given as points")
        return fit
    report(0.45, f"buffer check: fitting again with twice the buffer ({2 * used:g} m)")
    wide_mask = _habitat_mask(history, buffer_m=2 * used, spacing_m=spacing_m, mask=polygon)
    try:
        wide = fit_on(wide_mask, _start_of(fit))
    except (FitNotConverged, idf.NotIdentifiable):
        report(1.0, "done")
        return _with_note(fit, f"buffer check: the fit with twice the buffer ({2 * used:g} m) did not converge")
    report(1.0, "done")
    change = _change(fit, wide)
    check = BufferCheck(buffer_m=used, doubled_buffer_m=2.0 * used,
                        density_per_ha=fit.density_per_ha.value, doubled_density_per_ha=wide.density_per_ha.value,
                        relative_change=float(change), changed=bool(abs(change) > BUFFER_TOLERANCE))
    notes = fit.notes + ((check.message,) if check.changed else ())
    return replace(fit, buffer_check=check, notes=notes)


def _start_of(fit: DensityFit) -> dict[str, float]:
    out = {fit.detection_name: fit.detection.value, "sigma": fit.sigma_m.value}
    if not fit.conditional:
        out["D"] = fit.density_per_ha.value
    return out


def _change(narrow: DensityFit, wide: DensityFit) -> float:
    return wide.density_per_ha.value / narrow.density_per_ha.value - 1


def assess_fit(fit: DensityFit, shape: idf.ArrayShape | None = None) -> str | None:
    """The identifiability check a fit fails (:func:`core.field.scr_identifiability.failed_criterion`), or None."""
    shape = shape or idf.array_shape(fit.history.xy)
    pts = np.asarray(fit.mask_points, dtype=float)
    mask_extent = float(np.hypot(*(pts.max(axis=0) - pts.min(axis=0)))) if pts.size else math.inf
    vcv = np.asarray(fit.link_vcv, dtype=float)
    return idf.failed_criterion(sigma=fit.sigma_m.value, sigma_lcl=fit.sigma_m.lcl, sigma_ucl=fit.sigma_m.ucl,
                                d_lcl=fit.density_per_ha.lcl, d_ucl=fit.density_per_ha.ucl, information=vcv,
                                shape=shape, mask_extent_m=mask_extent)


def suggest_buffer(history: CaptureHistory, *, detectfn: str, first: float, sigma: float,
                   rb_target: float = SUGGEST_RB_TARGET) -> float:
    """The narrowest buffer whose truncation of the habitat biases D by less than ``rb_target``, as secr's
    ``suggest.buffer`` finds it: with the fitted detection function and the detectors' usage, the effective
    sampled area within w of a detector, a(w) = sum of p.(x) over mask cells within w, is compared with a(inf);
    D-hat is about n / a(w), so its relative bias is a(inf) / a(w) - 1."""
    reach = sigma * (_SUGGEST_REACH_EX if detectfn == "EX" else _SUGGEST_REACH)
    if not (math.isfinite(reach) and reach > 0):
        return math.inf
    lo, hi = history.xy.min(axis=0) - reach, history.xy.max(axis=0) + reach
    step = float(max(hi - lo)) / _SUGGEST_POINTS
    xs, ys = np.arange(lo[0] + step / 2, hi[0], step), np.arange(lo[1] + step / 2, hi[1], step)
    points = np.column_stack([np.repeat(xs, ys.size), np.tile(ys, xs.size)])
    distance = nearest_detector_distance(points, history.xy)
    d2 = ((history.xy[:, None, :] - points[None, :, :]) ** 2).sum(axis=2)
    with np.errstate(over="ignore", under="ignore"):
        h = detection_hazard(detectfn, first, sigma, d2)
        pdot = -np.expm1(-(history.usage.sum(axis=1) @ h))
    order = np.argsort(distance)
    area = np.cumsum(pdot[order])
    if not area[-1] > 0:
        return math.inf
    enough = np.searchsorted(area, area[-1] / (1 + rb_target))
    return float(distance[order][min(enough, area.size - 1)])


def _with_note(fit: DensityFit, note: str) -> DensityFit:
    return replace(fit, notes=fit.notes + (note,))
