"""Detectors: find the animals (and people, vehicles) in a photo as normalised boxes.

Registry names (a box a detector made inside Rosette has the source ``detector:<name>``):

- ``megadetector``: MegaDetector v5 (YOLOv5x6, 1280 px) on weights found in ``$ROSETTE_WEIGHTS_DIR``
  (``md_v5a.0.0.pt`` ...; never downloaded), see :mod:`core.field.detectors.megadetector`. Without them it is listed
  as unavailable with the reason, and boxes can still come from a MegaDetector batch JSON
  (``rosette import FOLDER --detections MD.json``).

Every detector returns :class:`~core.annotations.Detection` s (category ``animal`` / ``person`` / ``vehicle``,
a :class:`~core.annotations.Box` [x, y, w, h] with origin top-left, confidence) and records its provenance in
``details()`` (weights file and sha256, thresholds). Availability is a file lookup: listing detectors and
:func:`detector_status` never import torch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.field.detectors import megadetector
from core.field.detectors.base import (  # noqa: F401  (the package's public names, defined there for its submodules)
    WEIGHTS_DIR_ENV,
    Detector,
    DetectorUnavailableError,
    weights_dir,
)
from core.registry import Registry, UnknownComponentError

__all__ = [
    "DETECTORS",
    "WEIGHTS_DIR_ENV",
    "Detector",
    "DetectorUnavailableError",
    "UnknownComponentError",
    "check_detector_name",
    "create_detector",
    "describe_detectors",
    "detector_available",
    "detector_status",
    "list_detectors",
]


DETECTORS: Registry[Detector] = Registry("detector")

#: name -> () -> (available here?, one-line reason); a file lookup, no heavy import.
_AVAILABILITY: dict[str, Callable[[], tuple[bool, str]]] = {}


@DETECTORS.register("megadetector", description="MegaDetector v5 (YOLOv5x6): animal, person and vehicle boxes "
                                                "(needs md_v5a.0.0.pt in $ROSETTE_WEIGHTS_DIR)")
def _make_megadetector(**opts: Any) -> Detector:
    return megadetector.MegaDetector(**opts)


_AVAILABILITY["megadetector"] = megadetector.available


def list_detectors() -> list[str]:
    """Registered detector names."""
    return DETECTORS.names()


def describe_detectors() -> dict[str, str]:
    """Detector name -> one-line description."""
    return DETECTORS.describe()


def detector_available(name: str) -> tuple[bool, str]:
    """(whether ``create_detector(name)`` can run here, one-line reason). Unknown names raise
    :class:`~core.registry.UnknownComponentError`."""
    DETECTORS.resolve(name)
    check = _AVAILABILITY.get(name)
    return check() if check is not None else (True, "no weights needed")


def detector_status() -> list[tuple[str, bool, str]]:
    """(name, available here?, reason) for every registered detector, available or not."""
    return [(name, *detector_available(name)) for name in list_detectors()]


def check_detector_name(name: str) -> str:
    """``name`` if a detector is registered under it (a request checks this when made), else the registry's
    error listing the known ones."""
    DETECTORS.resolve(name)
    return name


def create_detector(name: str, **opts: Any) -> Detector:
    """Build the detector registered under ``name``. Unknown names raise
    :class:`~core.registry.UnknownComponentError` listing the known ones; a detector whose weights are not here
    raises :class:`DetectorUnavailableError` with the reason."""
    return DETECTORS.create(name, **opts)
