"""The spatial capture-recapture likelihood (Borchers & Efford 2008; Efford, Borchers & Byrom 2009), with secr's
conventions, vectorised over the mask: half-normal, exponential and hazard half-normal detection; proximity, count
and multi-catch detectors; the conditional and the full likelihood.

The hazards, each detector kind's history probability and the log-likelihood as secr computes it, with sources:
docs/density.md."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import expit, gammaln, logit

from core.field.scr_data import CaptureHistory
from core.field.scr_mask import Mask

DETECTION_FUNCTIONS = ("HN", "HHN", "EX")
_TINY = 1e-300
#: Link values are clipped here before exp(): exp(700) is about 1e304, the largest a float holds with room to spare.
_LINK_LIMIT = 700.0


def _logexpm1(x: np.ndarray) -> np.ndarray:
    """log(exp(x) - 1) for x > 0 without overflow."""
    return x + np.log(-np.expm1(-x))


@dataclass(frozen=True, eq=False)
class ScrModel:
    """A capture history on a mask with its detector type and detection function, ready for the likelihood.

    Link parameters: (log D, logit g0 | log lambda0, log sigma) for the full likelihood, without log D for the
    conditional one. D is per hectare."""

    history: CaptureHistory
    mask: Mask
    detectfn: str
    conditional: bool
    d2: np.ndarray  # (K, M) squared distances
    row_k: np.ndarray  # (U,) detector of each row of the detections' terms
    row_usage: np.ndarray  # (U,) its usage (proximity: one row per distinct detector x usage; else per detector)
    weights: np.ndarray  # (n, U) each animal's detections in each row
    caught: np.ndarray  # (n, S) 1 where caught on the occasion (multi-catch only)
    constant: float  # terms free of the parameters: the multinomial coefficient; for counts and multi-catch
    # traps sum log T_ks over the detections (and for counts -sum log y!)
    exposure: np.ndarray | None = None  # (n, K) usage while each animal was in the study (None: no removal)

    @property
    def n_parameters(self) -> int:
        return 2 if self.conditional else 3

    @property
    def first_name(self) -> str:
        return "lambda0" if self.detectfn == "HHN" else "g0"


def logmultinomial(counts: np.ndarray) -> float:
    """log(n! / prod over distinct histories of (animals sharing it)!), secr's ``logmultinom``."""
    n = counts.shape[0]
    if n == 0:
        return 0.0
    _, sharing = np.unique(counts.reshape(n, -1), axis=0, return_counts=True)
    return float(gammaln(n + 1) - gammaln(sharing + 1).sum())


def prepare(history: CaptureHistory, mask: Mask, *, detectfn: str, conditional: bool) -> ScrModel:
    if detectfn not in DETECTION_FUNCTIONS:
        raise ValueError(f"detection function {detectfn!r} unknown; use one of {', '.join(DETECTION_FUNCTIONS)}")
    d2 = ((history.xy[:, None, :] - mask.xy[None, :, :]) ** 2).sum(axis=2)
    counts = history.counts  # (n, S, K)
    present = counts.sum(axis=0) > 0  # (S, K)
    pair_s, pair_k = np.nonzero(present)
    pair_usage = history.usage[pair_k, pair_s]
    pair_weights = counts[:, pair_s, pair_k].astype(float)  # (n, P)
    caught = (counts.sum(axis=2) > 0).astype(float)
    constant = logmultinomial(counts)
    if history.detector_type == "proximity":
        # log(exp(T h) - 1) depends on T and h together: one row per distinct (detector, usage)
        keys, inverse = np.unique(np.column_stack([pair_k, pair_usage]), axis=0, return_inverse=True)
        row_k, row_usage = keys[:, 0].astype(int), keys[:, 1]
    else:
        # log(T h) = log T + log h: one row per detector, log T moved to the constant
        constant += float((pair_weights * np.log(pair_usage)[None, :]).sum())
        row_k, inverse = np.unique(pair_k, return_inverse=True)
        row_usage = np.ones(row_k.size)
    weights = np.zeros((counts.shape[0], row_k.size))
    np.add.at(weights.T, inverse.ravel(), pair_weights.T)
    if history.detector_type == "count":
        constant -= float(gammaln(counts + 1).sum())
    return ScrModel(history=history, mask=mask, detectfn=detectfn, conditional=conditional, d2=d2,
                    row_k=row_k, row_usage=row_usage, weights=weights, caught=caught, constant=constant,
                    exposure=history.exposure())


def real_parameters(model: ScrModel, beta: np.ndarray) -> dict[str, float]:
    """D (per ha; absent for CL), g0 or lambda0, and sigma (m) from the link parameters."""
    beta = np.asarray(beta, dtype=float)
    beta = np.clip(beta, -_LINK_LIMIT, _LINK_LIMIT)  # exp() of a link value stays finite: no overflow, ever
    out: dict[str, float] = {}
    if not model.conditional:
        out["D"] = float(np.exp(beta[0]))
        beta = beta[1:]
    out[model.first_name] = float(np.exp(beta[0]) if model.detectfn == "HHN" else expit(beta[0]))
    out["sigma"] = float(np.exp(beta[1]))
    return out


def link_parameters(model: ScrModel, real: dict[str, float]) -> np.ndarray:
    # a start taken from a fit at its limits (g0 of 1, sigma of 1e300) still gives finite link values
    first = min(max(float(real[model.first_name]), _TINY), 1e300)
    first_link = math.log(first) if model.detectfn == "HHN" else float(logit(min(first, 1 - 1e-12)))
    values = [first_link, math.log(min(max(float(real["sigma"]), _TINY), 1e300))]
    if not model.conditional:
        values.insert(0, math.log(min(max(float(real["D"]), _TINY), 1e300)))
    return np.array(values)


def detection_hazard(detectfn: str, first: float, sigma: float, d2: np.ndarray) -> np.ndarray:
    """Hazard per unit usage at squared distance d2 (the hazards: docs/density.md)."""
    if detectfn == "HHN":
        return first * np.exp(-d2 / (2 * sigma * sigma))
    g = first * (np.exp(-d2 / (2 * sigma * sigma)) if detectfn == "HN" else np.exp(-np.sqrt(d2) / sigma))
    return -np.log1p(-g)


def detection_probability(detectfn: str, first: float, sigma: float, distance_m: np.ndarray) -> np.ndarray:
    """Probability of at least one detection in one unit of usage at ``distance_m``: the detection curve."""
    d = np.asarray(distance_m, dtype=float)
    return -np.expm1(-detection_hazard(detectfn, first, sigma, d * d))


def pdot_and_hazard(model: ScrModel, first: float, sigma: float) -> tuple[float, np.ndarray, np.ndarray]:
    """(p., the per-detector hazard h (K, M), the total hazard over the study at each mask point (M,))."""
    h = detection_hazard(model.detectfn, first, sigma, model.d2)
    total = model.history.usage.sum(axis=1) @ h
    pdot = float(np.mean(-np.expm1(-total)))
    return pdot, h, total


def log_likelihood(model: ScrModel, beta: np.ndarray) -> float:
    """The log-likelihood at the link parameters ``beta`` (-inf where it cannot be evaluated, never an overflow:
    a maximiser wandering towards sigma of 1e30 on an array that cannot measure it must get a number back)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore"):
        try:
            return _log_likelihood(model, beta)
        except (OverflowError, FloatingPointError, ZeroDivisionError, ValueError):
            return -math.inf


def _log_likelihood(model: ScrModel, beta: np.ndarray) -> float:
    real = real_parameters(model, beta)
    first, sigma = real[model.first_name], real["sigma"]
    if not (np.isfinite(first) and np.isfinite(sigma)) or sigma <= 0 or first <= 0:
        return -math.inf
    if model.detectfn != "HHN" and first >= 1:
        return -math.inf
    pdot, h, total = pdot_and_hazard(model, first, sigma)
    if not (pdot > 0):
        return -math.inf
    usage = model.history.usage
    detector = model.history.detector_type
    if detector == "proximity":
        row_log = _logexpm1(np.maximum(model.row_usage[:, None] * h[model.row_k], _TINY))  # (U, M)
    else:
        row_log = np.log(np.maximum(h[model.row_k], _TINY))
    log_pr = model.weights @ row_log  # (n, M)
    if detector == "multi":
        occasion_hazard = np.maximum(usage.T @ h, _TINY)  # (S, M)
        log_pr += model.caught @ (_logexpm1(occasion_hazard) - np.log(occasion_hazard))
    # an animal is exposed to detection only while it is in the study: a removed one stops at its removal
    log_pr -= total[None, :] if model.exposure is None else model.exposure @ h
    n_cells = model.mask.n_points
    n = model.history.n_animals
    top = log_pr.max(axis=1, keepdims=True)
    log_mean = float((np.log(np.exp(log_pr - top).sum(axis=1)) + top[:, 0]).sum()) - n * math.log(n_cells)
    value = log_mean - n * math.log(pdot) + model.constant
    if not model.conditional:
        expected = real["D"] * model.mask.area_ha * pdot
        value += n * math.log(expected) - expected - float(gammaln(n + 1))
    return value if math.isfinite(value) else -math.inf
