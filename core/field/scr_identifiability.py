"""Whether a detector array can carry a density estimate: the checks made before any figure is shown.

An SCR fit rests on sigma, the spatial scale of detection, and sigma is measured only by animals caught at
several stations that stand closer than about 2 sigma apart. When the array cannot measure it the likelihood is
flat in sigma: the maximum drifts far outside the array, the information matrix is (near) singular and the
intervals span orders of magnitude. Such a fit is refused with one sentence that says what the array lacks; the
sentence names only the array (its stations and their spacing), so the same data are refused in the same words at
any buffer. The thresholds below are deliberately loose: a study secr would fit well passes every one of them (the
secr reproductions and the simulated camera studies of tests/test_density_scr.py do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Fewest animals detected at two or more stations (spatial recaptures) for sigma to rest on more than one animal.
MIN_SPATIAL_RECAPTURES = 2
#: sigma beyond this multiple of the largest distance between two stations: every station is well inside every
#: detected animal's range, so detection hardly changes across the array and sigma is not measured.
SIGMA_EXTENT_FACTOR = 1.0
#: Condition number of the information matrix (on the link scale) above which it is treated as singular.
MAX_CONDITION = 1e10
#: An interval whose upper limit is more than this multiple of its lower limit says nothing (a CV of about 170%).
MAX_INTERVAL_RATIO = 100.0


class NotIdentifiable(ValueError):
    """The array cannot carry the estimate: :attr:`reason` is the one sentence shown instead of any number, and
    :attr:`criterion` names the check that failed (a stable key for programs)."""

    def __init__(self, reason: str, *, criterion: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.criterion = criterion


@dataclass(frozen=True)
class ArrayShape:
    """What the checks need to know about the detectors: how many, their mean nearest-neighbour spacing and the
    largest distance between two of them (metres)."""

    n_detectors: int
    spacing_m: float
    extent_m: float

    @property
    def words(self) -> str:
        return f"{self.n_detectors} station{'s' if self.n_detectors != 1 else ''} {distance_words(self.spacing_m)} apart"


def distance_words(metres: float) -> str:
    """A distance as a field user says it: two significant figures, in km from 1 km up."""
    if not math.isfinite(metres):
        return "an unknown distance"
    rounded = float(f"{metres:.2g}")  # 995 m reads "1 km", as a user would say it
    return f"{rounded / 1000:g} km" if rounded >= 1000 else f"{rounded:g} m"


def array_shape(xy: np.ndarray) -> ArrayShape:
    xy = np.asarray(xy, dtype=float)
    d = np.sqrt(((xy[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2))
    if xy.shape[0] < 2:
        return ArrayShape(int(xy.shape[0]), math.nan, 0.0)
    np.fill_diagonal(d, np.inf)
    spacing = float(np.mean(d.min(axis=1)))
    np.fill_diagonal(d, 0.0)
    return ArrayShape(int(xy.shape[0]), spacing, float(d.max()))


def movement_sentence(shape: ArrayShape) -> str:
    """The refusal of a fit whose sigma the array cannot measure."""
    return (f"{shape.words} cannot measure how far these animals move; SCR needs stations closer than about "
            "2 sigma and animals caught at several stations.")


def spatial_recaptures(counts: np.ndarray) -> int:
    """Animals detected at two or more detectors, from an (animals, occasions, detectors) array of counts."""
    return int(((np.asarray(counts).sum(axis=1) > 0).sum(axis=1) >= 2).sum())


def check_history(counts: np.ndarray, shape: ArrayShape) -> None:
    """Refuse, before any fit, a history with one animal or too few spatial recaptures."""
    n_animals = int(np.asarray(counts).shape[0])
    if n_animals == 1:
        raise NotIdentifiable(f"Only one animal was detected, at {shape.words}: no density can be trusted from one "
                              "animal; SCR needs several animals caught at several stations.", criterion="one_animal")
    recaptured = spatial_recaptures(counts)
    if recaptured < MIN_SPATIAL_RECAPTURES:
        raise NotIdentifiable(
            f"{shape.words[0].upper()}{shape.words[1:]} caught only {recaptured} animal at more than one station, too "
            f"few to measure how far these animals move; SCR needs at least {MIN_SPATIAL_RECAPTURES} animals caught "
            "at several stations, and stations closer than about 2 sigma.", criterion="spatial_recaptures")


def interval_ratio(lcl: float, ucl: float) -> float:
    """ucl / lcl (inf when the interval is missing or touches 0)."""
    if not (math.isfinite(lcl) and math.isfinite(ucl)) or lcl <= 0:
        return math.inf
    return ucl / lcl


def condition_number(matrix: np.ndarray) -> float:
    """The 2-norm condition number of a symmetric matrix (inf when it is singular or not finite)."""
    m = np.asarray(matrix, dtype=float)
    if m.size == 0 or not np.all(np.isfinite(m)):
        return math.inf
    eig = np.abs(np.linalg.eigvalsh(m))
    return float(eig.max() / eig.min()) if eig.min() > 0 else math.inf


def failed_criterion(*, sigma: float, sigma_lcl: float, sigma_ucl: float, d_lcl: float, d_ucl: float,
                     information: np.ndarray, shape: ArrayShape, mask_extent_m: float) -> str | None:
    """The first check a fitted model fails, or None: sigma beyond the array, a singular information matrix, a
    sigma interval reaching past the mask or spanning more than :data:`MAX_INTERVAL_RATIO`, a D interval as wide."""
    if not math.isfinite(sigma) or sigma > SIGMA_EXTENT_FACTOR * shape.extent_m:
        return "sigma_beyond_array"
    if condition_number(information) > MAX_CONDITION:
        return "singular_information"
    if not math.isfinite(sigma_ucl) or sigma_ucl > mask_extent_m:
        return "sigma_interval_beyond_mask"
    if interval_ratio(sigma_lcl, sigma_ucl) > MAX_INTERVAL_RATIO:
        return "sigma_interval_too_wide"
    if interval_ratio(d_lcl, d_ucl) > MAX_INTERVAL_RATIO:
        return "density_interval_too_wide"
    return None


def refusal(criterion: str, shape: ArrayShape) -> NotIdentifiable:
    """The refusal of a fitted model that failed ``criterion`` (every failure of sigma reads the same)."""
    if criterion == "density_interval_too_wide":
        return NotIdentifiable(
            f"{shape.words[0].upper()}{shape.words[1:]} caught too few animals to estimate density: its 95% "
            f"interval would span more than a factor of {MAX_INTERVAL_RATIO:g}; SCR needs more animals caught at "
            "several stations.", criterion=criterion)
    return NotIdentifiable(movement_sentence(shape), criterion=criterion)
