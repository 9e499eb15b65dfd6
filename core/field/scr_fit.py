"""Maximum-likelihood fits of the models of :mod:`core.field.scr_models`, as secr's ``secr.fit`` makes them.

:func:`fit_scr_model` takes sessions and a model (``"g0~b, sigma~sex"``) and returns a :class:`ScrModelFit`: the
coefficients on the link scale named as secr names them, with SEs from the numerical Hessian and Wald intervals;
each session's density (per ha, and per 100 km^2 in :meth:`ScrModelFit.as_dict`), g0 or lambda0 and sigma (per sex
where the model lets them differ), the log-likelihood on secr's scale, AIC and AICc (n = animals detected, summed
over sessions, as secr counts it). The optimiser follows :mod:`core.field.density`: BFGS on numerical gradients,
then Newton steps on the numerical Hessian, a maximum accepted only where the gradient vanishes."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit, logit
from threadpoolctl import threadpool_limits

from core.field.density import (
    GRADIENT_TOLERANCE,
    Z95,
    Estimate,
    numerical_gradient,
    numerical_hessian,
    root_pooled_spatial_variance,
)
from core.field.scr_errors import FitNotConverged
from core.field.scr_mask import summarise_spacing
from core.field.scr_models import SEX_LEVELS, ModelFormula, PreparedModels, ScrSession, prepare_models

_FIRST_STARTS = (0.05, 0.15, 0.4)
_SIGMA_FACTORS = (0.8, 1.2, 1.8)
#: Newton steps follow BFGS only while the gradient is above this (log-likelihood units per link unit): below it
#: the coefficients are within about 1e-6 of the maximum already.
_POLISH_ABOVE = 1e-5


@dataclass(frozen=True)
class CoefficientEstimate:
    """One link-scale coefficient with its SE and 95% Wald interval, named as secr names it."""

    name: str
    beta: float
    se: float
    lcl: float
    ucl: float


@dataclass(frozen=True)
class SessionEstimates:
    """One session's real parameters. ``density_per_ha``: the full likelihood's D (its mean over the mask where D
    depends on a mask covariate), or the conditional likelihood's derived (Horvitz-Thompson) D; ``detection`` and
    ``sigma_m`` for a naive animal on the first occasion, keyed by sex ('F', 'M') where they differ by sex, else
    by ''."""

    name: str
    n_animals: int
    density_per_ha: Estimate
    detection: Mapping[str, Estimate]
    sigma_m: Mapping[str, Estimate]
    pmix: Mapping[str, Estimate] | None = None

    def as_dict(self, detection_name: str) -> dict[str, object]:
        def block(values: Mapping[str, Estimate]) -> object:
            if set(values) == {""}:
                return values[""].as_dict()
            return {k: v.as_dict() for k, v in values.items()}

        out: dict[str, object] = {"session": self.name, "n_animals": self.n_animals,
                                  "D_per_100km2": self.density_per_ha.scaled(10_000.0).as_dict(),
                                  detection_name: block(self.detection), "sigma_m": block(self.sigma_m)}
        if self.pmix is not None:
            out["pmix"] = block(self.pmix)
        return out


@dataclass(frozen=True, eq=False)
class ScrModelFit:
    """A fitted model (see the module's docstring)."""

    model: str
    detectfn: str
    detector: str
    conditional: bool
    d_link: str
    class_mode: str
    likelihood_form: str
    names: tuple[str, ...]
    beta: np.ndarray
    se: np.ndarray
    vcv: np.ndarray
    loglik: float
    n_parameters: int
    n_animals: int
    aic: float
    aicc: float
    sessions: tuple[SessionEstimates, ...]
    notes: tuple[str, ...] = ()

    @property
    def detection_name(self) -> str:
        return "lambda0" if self.detectfn == "HHN" else "g0"

    @property
    def pooled(self) -> bool:
        return "pooled" in self.likelihood_form

    def coefficients(self) -> list[CoefficientEstimate]:
        return [CoefficientEstimate(n, float(b), float(s), float(b - Z95 * s), float(b + Z95 * s))
                for n, b, s in zip(self.names, self.beta, self.se)]

    def coefficient(self, name: str) -> float:
        return float(self.beta[self.names.index(name)])

    def as_dict(self) -> dict[str, object]:
        def clean(v: float) -> float | None:
            return float(v) if math.isfinite(v) else None

        return {
            "model": self.model, "detectfn": self.detectfn, "detector": self.detector,
            "likelihood": "conditional" if self.conditional else "full", "likelihood_form": self.likelihood_form,
            "D_link": None if self.conditional else self.d_link,
            "sex": {"none": None, "mixture": "hcov mixture", "covariate": "known covariate"}[self.class_mode],
            "loglik": self.loglik, "AIC": self.aic, "AICc": clean(self.aicc), "n_parameters": self.n_parameters,
            "n_animals": self.n_animals,
            "coefficients": {c.name: {"beta": clean(c.beta), "se": clean(c.se), "lcl": clean(c.lcl),
                                      "ucl": clean(c.ucl)} for c in self.coefficients()},
            "sessions": [s.as_dict(self.detection_name) for s in self.sessions],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------- starts and the maximiser


def start_vector(prepared: PreparedModels) -> np.ndarray:
    """secr-like starts: sigma around the pooled RPSV of the sessions, g0 (or lambda0) from a small grid, D from
    n / (p. A), pmix from the known sexes, every other coefficient 0; the best of the grid by log L."""
    rpsv = [root_pooled_spatial_variance(s.history) for s in prepared.sessions]
    rpsv = [r for r in rpsv if r > 0]
    sigma0 = float(np.mean(rpsv)) if rpsv else summarise_spacing(prepared.sessions[0].history.xy) / 2
    names = prepared.names
    best: tuple[float, np.ndarray] | None = None
    for factor in _SIGMA_FACTORS:
        for first in _FIRST_STARTS:
            beta = np.zeros(len(names))
            beta[names.index(prepared.first_name)] = math.log(first) if prepared.detectfn == "HHN" else logit(first)
            beta[names.index("sigma")] = math.log(sigma0 * factor)
            if "pmix.h2M" in names:
                sexes = [c for s in prepared.sessions for c in (s.sex or ()) if c is not None]
                share = (sexes.count(SEX_LEVELS[1]) + 0.5) / (len(sexes) + 1.0)
                beta[names.index("pmix.h2M")] = float(logit(share))
            if not prepared.conditional:
                if prepared.links["D"] == "identity":
                    beta[names.index("D")] = 1.0  # a flat surface while p. is computed
                esa = 0.0
                for j in range(len(prepared.sessions)):
                    pdots = prepared.class_pdots(j, beta)
                    esa += float(np.mean(pdots)) * prepared.mask_area_ha(j)
                d0 = prepared.n_animals / esa if esa > 0 else 1.0
                beta[names.index("D")] = d0 if prepared.links["D"] == "identity" else math.log(d0)
            value = prepared.log_likelihood(beta)
            if math.isfinite(value) and (best is None or value > best[0]):
                best = (value, beta)
    if best is None:
        raise FitNotConverged("the likelihood cannot be evaluated at any start value; check the masks and the "
                              "detectors' coordinates")
    return best[1]


def _scales(prepared: PreparedModels) -> np.ndarray:
    """Each coefficient's covariate spread (1 for intercepts and factors), so that the optimiser works on
    coefficients of one order: a covariate in metres has slopes of 1e-3."""
    out = np.ones(len(prepared.names))
    for j, c in enumerate(prepared.coefficients):
        if c.parameter == "D" and c.column:
            values = [np.asarray(s.mask_covariates[c.column], dtype=float) for s in prepared.sessions
                      if c.column in s.mask_covariates]
            if values:
                spread = float(np.std(np.concatenate(values)))
                out[j] = spread if spread > 0 else 1.0
    return out


def _maximise(fn: Callable[[np.ndarray], float], start: np.ndarray) -> tuple[np.ndarray, float, bool]:
    """Minimise ``fn``: BFGS on central-difference gradients, then Newton steps on the numerical Hessian."""
    result = minimize(fn, start, jac=lambda b: numerical_gradient(fn, b), method="BFGS",
                      options={"gtol": 1e-6, "maxiter": 500})
    z = np.asarray(result.x, dtype=float)
    best = fn(z)
    grad = numerical_gradient(fn, z)
    for _ in range(4):
        if np.max(np.abs(grad)) < _POLISH_ABOVE:
            break
        try:
            step = np.linalg.solve(numerical_hessian(fn, z), grad)
        except np.linalg.LinAlgError:
            break
        if not np.all(np.isfinite(step)) or np.max(np.abs(step)) > 0.5:
            break
        value = fn(z - step)
        if value <= best:
            z, best = z - step, value
        else:
            break
        grad = numerical_gradient(fn, z)
    return z, best, bool(best < 1e9 and np.max(np.abs(grad)) < GRADIENT_TOLERANCE)


# --------------------------------------------------------------------------- real parameters


def _wald_real(fn: Callable[[np.ndarray], float], beta: np.ndarray, vcv: np.ndarray, link: str) -> Estimate:
    """A real parameter as a function of the coefficients, its SE by the delta method and a Wald interval on its
    link scale (secr's ``predict``)."""
    value = fn(beta)
    forward = {"log": math.log, "logit": lambda v: float(logit(v)), "identity": lambda v: v}[link]
    inverse = {"log": math.exp, "logit": lambda v: float(expit(v)), "identity": lambda v: v}[link]
    if not (np.all(np.isfinite(vcv)) and math.isfinite(value)):
        return Estimate(value, math.nan, math.nan, math.nan)
    grad = numerical_gradient(lambda b: forward(fn(b)), beta)
    variance = float(grad @ vcv @ grad)
    se_link = math.sqrt(variance) if variance > 0 else math.nan
    eta = forward(value)
    derivative = {"log": value, "logit": value * (1 - value), "identity": 1.0}[link]
    with np.errstate(over="ignore"):
        lo, hi = (inverse(min(eta - Z95 * se_link, 700.0)), inverse(min(eta + Z95 * se_link, 700.0))) \
            if math.isfinite(se_link) else (math.nan, math.nan)
    return Estimate(value, derivative * se_link, lo, hi)


def _lognormal(value: float, se: float) -> Estimate:
    if not (math.isfinite(se) and value > 0):
        return Estimate(value, se, math.nan, math.nan)
    c = math.exp(Z95 * math.sqrt(math.log1p((se / value) ** 2)))
    return Estimate(value, se, value / c, value * c)


def _session_estimates(prepared: PreparedModels, beta: np.ndarray, vcv: np.ndarray) -> tuple[SessionEstimates, ...]:
    out = []
    first_link = "log" if prepared.detectfn == "HHN" else "logit"
    for j, session in enumerate(prepared.sessions):
        area = prepared.mask_area_ha(j)
        if prepared.conditional:
            def derived(b: np.ndarray, j: int = j) -> float:
                return float((1.0 / prepared.session_pdots(b)[j]).sum()) / area

            pdots = prepared.session_pdots(beta)[j]
            value = derived(beta)
            grad = numerical_gradient(derived, beta)
            variance = float((1.0 / pdots ** 2).sum()) / area ** 2 + float(grad @ vcv @ grad)
            density = _lognormal(value, math.sqrt(variance) if variance > 0 else math.nan)
        else:
            density = _wald_real(lambda b, j=j: float(prepared.density_surface(j, b).mean()), beta, vcv,
                                 prepared.links["D"])
        classes = [0] if prepared.class_mode == "none" else [0, 1]
        detection: dict[str, Estimate] = {}
        sigma: dict[str, Estimate] = {}
        for which, store, index, link in ((prepared.first_name, detection, 0, first_link),
                                          ("sigma", sigma, 1, "log")):
            by_class = prepared.varies_by_class(which)
            for x in (classes if by_class else [0]):
                label = SEX_LEVELS[x] if by_class else ""
                store[label] = _wald_real(lambda b, j=j, x=x, index=index: prepared.naive_detection(j, b, cls=x)[index],
                                          beta, vcv, link)
        pmix = None
        if prepared.class_mode == "mixture":
            pmix = {SEX_LEVELS[1]: _wald_real(lambda b: float(prepared.pmix(b)[1]), beta, vcv, "logit")}
            pmix[SEX_LEVELS[0]] = Estimate(1 - pmix["M"].value, pmix["M"].se, 1 - pmix["M"].ucl, 1 - pmix["M"].lcl)
        out.append(SessionEstimates(name=session.name, n_animals=session.history.n_animals, density_per_ha=density,
                                    detection=detection, sigma_m=sigma, pmix=pmix))
    return tuple(out)


# --------------------------------------------------------------------------- the fit


def fit_prepared(prepared: PreparedModels, *, start: Sequence[float] | Mapping[str, float] | None = None
                 ) -> ScrModelFit:
    """Maximise the likelihood of a prepared model (from ``start``, secr-named coefficients, or
    :func:`start_vector`); raise :class:`FitNotConverged` when no maximum is found."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit_prepared(prepared, start=start)


def _fit_prepared(prepared: PreparedModels, *, start) -> ScrModelFit:
    names = prepared.names
    if start is None:
        beta0 = start_vector(prepared)
    elif isinstance(start, Mapping):
        beta0 = start_vector(prepared)
        for k, v in start.items():
            beta0[names.index(k)] = float(v)
    else:
        beta0 = np.asarray(start, dtype=float)
    scale = _scales(prepared)

    def negative(z: np.ndarray) -> float:
        value = prepared.log_likelihood(z / scale)
        return -value if math.isfinite(value) else 1e10

    z, best, converged = _maximise(negative, beta0 * scale)
    if not converged:
        raise FitNotConverged(f"the model {prepared.formula} did not converge; the data may not carry it (too few "
                              "recaptures for a learned response, too few animals of one sex), or the mask may not "
                              "suit them", starts=[dict(zip(names, map(float, beta0)))])
    beta = z / scale
    loglik = -best
    notes: list[str] = []
    hess_z = numerical_hessian(negative, z)
    try:
        vcv_z = np.linalg.inv(hess_z)
        if not np.all(np.isfinite(vcv_z)) or np.any(np.diag(vcv_z) <= 0):
            raise np.linalg.LinAlgError
        vcv = vcv_z / np.outer(scale, scale)
    except np.linalg.LinAlgError:
        vcv = np.full((len(names), len(names)), np.nan)
        notes.append("the Hessian is not positive definite: standard errors and intervals are not available")
    se = np.sqrt(np.where(np.diag(vcv) > 0, np.diag(vcv), np.nan))
    k = len(names)
    n = prepared.n_animals
    aic = -2 * loglik + 2 * k
    aicc = aic + (2 * k * (k + 1) / (n - k - 1) if n - k - 1 > 0 else math.nan)
    if prepared.class_mode == "mixture":
        notes.append("sex fitted as secr's hcov two-class mixture: unsexed animals count towards both sexes by pmix")
    sessions = _session_estimates(prepared, beta, vcv)
    return ScrModelFit(model=str(prepared.formula), detectfn=prepared.detectfn, detector=prepared.detector_type,
                       conditional=prepared.conditional, d_link=prepared.links.get("D", "log"),
                       class_mode=prepared.class_mode, likelihood_form=prepared.likelihood_form, names=names,
                       beta=beta, se=se, vcv=vcv, loglik=loglik, n_parameters=k, n_animals=n, aic=aic, aicc=aicc,
                       sessions=sessions, notes=tuple(notes))


def fit_scr_model(sessions: Sequence[ScrSession], model: str | ModelFormula, *, detectfn: str = "HN",
                  conditional: bool = False, d_link: str = "log", hcov: bool | None = None,
                  fastproximity: bool = True, start: Sequence[float] | Mapping[str, float] | None = None
                  ) -> ScrModelFit:
    """Fit ``model`` (secr's formula language, :func:`core.field.scr_models.parse_model`) to ``sessions``; the
    options are :func:`core.field.scr_models.prepare_models`'s."""
    prepared = prepare_models(sessions, model, detectfn=detectfn, conditional=conditional, d_link=d_link, hcov=hcov,
                              fastproximity=fastproximity)
    return fit_prepared(prepared, start=start)
