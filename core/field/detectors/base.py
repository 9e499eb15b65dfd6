"""What every detector shares: the protocol, the error for missing weights, and small helpers. The detector modules
import this, not the package, whose registry imports them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from core.annotations import Detection

#: Env var naming the folder where weight files are put by hand (never downloaded).
WEIGHTS_DIR_ENV = "ROSETTE_WEIGHTS_DIR"


class DetectorUnavailableError(FileNotFoundError):
    """A detector cannot run here (its weights are not on this machine); the message says what to do. A
    FileNotFoundError, so the CLI prints it as a one-line error."""


@runtime_checkable
class Detector(Protocol):
    """Anything that finds animals (and people, vehicles) in a photo.

    ``detect`` takes an HxWx3 RGB uint8 array and returns :class:`~core.annotations.Detection` s: a category
    (``animal`` / ``person`` / ``vehicle``), a normalised box [x, y, w, h] with origin top-left (as MegaDetector's
    batch output) and a confidence in [0, 1], best first. ``details`` is the provenance recorded with the boxes
    (weights file and its sha256, thresholds, input size).
    """

    name: str

    def detect(self, rgb: np.ndarray) -> list[Detection]: ...

    def details(self) -> dict[str, Any]: ...


def weights_dir() -> Path | None:
    """``$ROSETTE_WEIGHTS_DIR`` as a path, or None when it is not set."""
    root = os.environ.get(WEIGHTS_DIR_ENV, "").strip()
    return Path(root).expanduser() if root else None


