"""Density with identification uncertainty: each draw of the imputed identities (:mod:`core.field.identities`)
rebuilt as spatial capture histories and fitted by spatial capture-recapture (:mod:`core.field.density`), and the
draws combined into one interval by the rule the population estimates use (:func:`core.field.identities.
combine_draws`, with the floor at 0 instead of the animals seen: D, sigma and g0 have no count to stand on).

Pure numpy over arrays and dataclasses. Every draw is fitted on the same habitat mask and detectors as the study
as decided, so the draws differ only in who was detected where; each draw starts from the previous draw's
estimates (D scaled by its number of animals), which a draw a few identities away almost always converges from in
a handful of steps, and falls back to secr's grid of starts only when it does not.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from core.field import identities as ids
from core.field.capthist import Trap
from core.field.density import DensityFit, fit_model
from core.field.scr_data import build_capture_history
from core.field.scr_errors import FitNotConverged
from core.field.scr_likelihood import prepare, real_parameters
from core.field.scr_mask import Mask

#: How the draws of each parameter are combined, stated in every answer.
DENSITY_COMBINE_METHOD = (
    "draw mixture, as the population estimates combine their draws: each draw's estimate as a split log-normal "
    "matching its own 95% interval (secr's log-normal interval for D), the 2.5% and 97.5% quantiles of the "
    "equal-weight mixture of the draws, the estimate the median of the draws; the share from identification is "
    "1 - (the draws' mean own width) / (the combined width)")
#: A new animal of a draw is named with this prefix, which no secr token holds ('#' is made '_' there).
NEW_ANIMAL = "#new-"
PARAMETERS = ("D", "detection", "sigma")


@dataclass(frozen=True)
class DrawDetections:
    """The study's detections as the draws rebuild them: the curator-fixed ones as (animal, occasion from 1,
    detector), and for each unit of the imputation input (in its order) the (occasion from 1, detector) of its
    detections at a located station; ``individuals`` names each catalogue index of the input's draws."""

    session: str
    fixed: tuple[tuple[str, int, str], ...]
    units: tuple[tuple[tuple[int, str], ...], ...]
    individuals: tuple[str, ...]

    def captures(self, labels: Sequence[int] | np.ndarray) -> list[tuple[str, str, int, str]]:
        """secr's capture rows (session, animal, occasion, detector) of one draw, ``labels`` its row of
        :func:`core.field.identities.sample_identities` (new animals K + the index of their first unit)."""
        if len(labels) != len(self.units):
            raise ValueError(f"a draw names {len(labels)} units' individuals; the study has {len(self.units)}")
        K = len(self.individuals)
        rows = [(self.session, a, k, det) for a, k, det in self.fixed]
        for label, detections in zip(labels, self.units):
            label = int(label)
            animal = self.individuals[label] if label < K else f"{NEW_ANIMAL}{label - K}"
            rows += [(self.session, animal, k, det) for k, det in detections]
        return rows


@dataclass(frozen=True)
class DensityDraws:
    """Per draw: D per 100 km², the detection parameter (g0 or lambda0) and sigma (m), each with its own 95%
    interval (NaN where the draw's fit did not converge or gave no interval), and the animals the draw holds."""

    D: np.ndarray
    D_low: np.ndarray
    D_high: np.ndarray
    detection: np.ndarray
    detection_low: np.ndarray
    detection_high: np.ndarray
    sigma: np.ndarray
    sigma_low: np.ndarray
    sigma_high: np.ndarray
    animals: np.ndarray
    from_previous: int  # draws that converged from the previous draw's estimates
    seconds: float

    @property
    def draws(self) -> int:
        return int(self.D.size)

    @property
    def failed(self) -> int:
        return int(np.sum(~np.isfinite(self.D)))


def mask_of(fit: DensityFit) -> Mask:
    """The habitat mask a fit used, exactly (its points unrounded), for the draws to share."""
    return Mask(xy=np.asarray(fit.mask_points, dtype=float), spacing_m=fit.mask.spacing_m,
                buffer_m=fit.mask.buffer_m, source=fit.mask.source)


def start_of(fit: DensityFit) -> dict[str, float]:
    """A fit's estimates as real start values (D per hectare included, also for the conditional likelihood)."""
    model = prepare(fit.history, mask_of(fit), detectfn=fit.detectfn, conditional=fit.conditional)
    real = real_parameters(model, np.asarray(fit.link_estimates, dtype=float))
    real.setdefault("D", fit.density_per_ha.value)
    return real


def _triple(est) -> tuple[float, float, float]:
    return est.value, est.lcl, est.ucl


def fit_draws(detections: DrawDetections, labels: np.ndarray, traps: Sequence[Trap], *, mask: Mask, detector: str,
              detectfn: str, conditional: bool, start: dict[str, float] | None = None,
              progress: Callable[[int, int], None] | None = None,
              should_stop: Callable[[], bool] | None = None) -> DensityDraws:
    """Fit every draw (a row of ``labels``) on ``mask``: each from the previous draw's estimates (the first from
    ``start``, the study as decided), else from secr's grid of starts. A draw whose fit does not converge, or
    gives no interval, is NaN and left out when the draws are combined. A stop raises
    :class:`core.field.identities.ImputationCancelled`; nothing is kept."""
    began = time.perf_counter()
    n = int(labels.shape[0])
    out = {k: np.full(n, np.nan) for k in ("D", "D_low", "D_high", "detection", "detection_low", "detection_high",
                                           "sigma", "sigma_low", "sigma_high")}
    animals = np.zeros(n, dtype=np.int64)
    previous = dict(start) if start else None
    previous_animals = None
    from_previous = 0
    for d in range(n):
        if should_stop is not None and should_stop():
            raise ids.ImputationCancelled(f"stopped after {d} of {n} density draws; nothing was kept")
        history = build_capture_history(detections.captures(labels[d]), traps, detector_type=detector)
        animals[d] = history.n_animals
        model = prepare(history, mask, detectfn=detectfn, conditional=conditional)
        fit = None
        if previous is not None:
            first = dict(previous)
            if previous_animals:  # D moves with the animals caught; the detection curve hardly does
                first["D"] = first["D"] * history.n_animals / previous_animals
            try:
                fit = fit_model(model, starts=[first])
                from_previous += 1
            except FitNotConverged:
                fit = None
        if fit is None:
            try:
                fit = fit_model(model)
            except FitNotConverged:
                fit = None
        if fit is not None:
            values = (*_triple(fit.density_per_100km2), *_triple(fit.detection), *_triple(fit.sigma_m))
            if all(math.isfinite(v) for v in values):
                for key, v in zip(out, values):
                    out[key][d] = v
                previous = real_parameters(model, np.asarray(fit.link_estimates, dtype=float))
                previous.setdefault("D", fit.density_per_ha.value)
                previous_animals = history.n_animals
        if progress is not None:
            progress(d + 1, n)
    return DensityDraws(**out, animals=animals, from_previous=from_previous, seconds=time.perf_counter() - began)


def combine_density(draws: DensityDraws, *, detection_name: str = "g0") -> dict[str, ids.CombinedEstimate]:
    """D (per 100 km²), the detection parameter and sigma over the draws, each by
    :func:`core.field.identities.combine_draws` with the floor at 0 (:data:`DENSITY_COMBINE_METHOD`); keyed
    ``D``, ``detection_name`` and ``sigma``."""
    floor = np.zeros(draws.draws)
    out = {}
    for key, name in zip(PARAMETERS, ("D", detection_name, "sigma")):
        value = getattr(draws, key)
        low, high = getattr(draws, f"{key}_low"), getattr(draws, f"{key}_high")
        out[name] = replace(ids.combine_draws(name, value, low, high, floor), method=DENSITY_COMBINE_METHOD)
    return out
