"""What the density engine refuses, each saying what to do about it.

Every input fault is a :class:`DensityInputError` (a ``ValueError``), so a caller can show its message as it is;
a fit that finds no maximum raises :class:`FitNotConverged` (a ``RuntimeError``) naming the start values tried.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class DensityInputError(ValueError):
    """Captures, detectors, usage or mask that no density can be fitted from."""


class SigmaNotEstimable(DensityInputError):
    """No animal was detected at two different detectors, so the spatial scale sigma has nothing to go on."""


class DetectorLayoutError(DensityInputError):
    """Detectors without usable coordinates, or all at one point."""


class MaskError(DensityInputError):
    """A buffer of zero or less, or a habitat mask with no point near a detector."""


class UnknownDetector(DensityInputError):
    """A capture names a detector that the traps file does not list."""


class OccasionNotCovered(DensityInputError):
    """A capture falls on an occasion the detectors' usage does not cover (or on which its detector was off)."""


class FitNotConverged(RuntimeError):
    """The likelihood maximiser found no maximum from any start; :attr:`starts` holds each start tried and
    :attr:`reached` the real parameters where the best attempt stopped (a sigma far outside the array there says
    the array cannot measure it)."""

    def __init__(self, message: str, *, starts: Sequence[Mapping[str, float]] = (),
                 reached: Mapping[str, float] | None = None) -> None:
        super().__init__(message)
        self.starts = tuple(dict(s) for s in starts)
        self.reached = dict(reached) if reached is not None else None
