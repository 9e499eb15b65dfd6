"""What every detector shares: the protocol, the error for missing weights, and small helpers. The detector modules
import this, not the package, whose registry imports them."""

from __future__ import annotations

import hashlib
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


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, streamed."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def as_rgb_uint8(rgb: np.ndarray) -> np.ndarray:
    """Validate a photo as HxWx3 uint8 (grey HxW is stacked, an alpha channel dropped, floats in [0, 1] scaled)."""
    arr = np.asarray(rgb)
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"expected an HxWx3 RGB image, got shape {arr.shape}")
    arr = arr[:, :, :3]
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"empty image of shape {arr.shape}")
    if arr.dtype != np.uint8:
        if np.issubdtype(arr.dtype, np.floating) and arr.size and float(np.nanmax(arr)) <= 1.0:
            arr = arr * 255.0
        arr = np.clip(np.rint(np.nan_to_num(arr)), 0, 255).astype(np.uint8)
    return np.ascontiguousarray(arr)
