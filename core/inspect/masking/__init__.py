"""Maskers (animal vs background), mask quality and mask PNG storage.

Registry names (what the database stores as the image's mask source): ``alpha`` (the mask that came with the
file), ``grabcut`` (the weight-free fallback, :mod:`core.inspect.masking.grabcut`) and ``sam2``
(:mod:`core.inspect.masking.sam2_masker`, needs a checkpoint). Every masker returns a :class:`MaskResult` with
provenance, so any mask in the app can be traced to what made it. Mask quality is the solidity |M| / |hull(M)|
in (0, 1] (0.0 for an empty mask); the Lorentz head trusts a low-solidity mask less.

How solidity is rasterised: docs/inspect.md."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.inspect.masking.base import (  # noqa: F401  (the package's public names, defined there for its submodules)
    ALPHA_THRESHOLD,
    DEFAULT_BOX_MARGIN,
    PARTIAL_EXTENT,
    QUALITY_FLAGS,
    SAM2_CHECKPOINT_ENV,
    SAM2_CONFIG_ENV,
    Masker,
    MaskQuality,
    MaskResult,
    as_bool_mask,
    as_rgb_uint8,
    convex_hull_mask,
    decode_mask_png,
    default_box,
    encode_mask_png,
    mask_quality,
    prompt_of,
    solidity,
    validate_prompts,
)
from core.inspect.masking.grabcut import GrabCutMasker
from core.registry import Registry

__all__ = [
    "ALPHA_THRESHOLD",
    "MASKERS",
    "AlphaMasker",
    "MaskQuality",
    "MaskResult",
    "Masker",
    "as_rgb_uint8",
    "create_masker",
    "decode_mask_png",
    "default_box",
    "default_masker_name",
    "describe_maskers",
    "encode_mask_png",
    "list_maskers",
    "mask_quality",
    "sam2_checkpoint_configured",
    "solidity",
]


MASKERS: Registry[Masker] = Registry("masker")


class AlphaMasker:
    """Mask from the file's own alpha channel: foreground = alpha > threshold (default 127)."""

    name = "alpha"

    def __init__(self, *, threshold: int = ALPHA_THRESHOLD) -> None:
        self.threshold = int(threshold)

    def predict(
        self,
        rgb: np.ndarray,
        *,
        points: Sequence[tuple[float, float]] | None = None,
        point_labels: Sequence[int] | None = None,
        box: tuple[float, float, float, float] | None = None,
        alpha: np.ndarray | None = None,
    ) -> MaskResult:
        """Threshold ``alpha`` (HxW uint8, or float in [0, 1]); prompts are ignored."""
        if alpha is None:
            raise ValueError(
                "the 'alpha' masker needs the file's alpha channel: call predict(rgb, alpha=rgba[..., 3]); "
                "this photo has no alpha, so use the 'grabcut' or 'sam2' masker instead"
            )
        h, w = np.asarray(rgb).shape[:2]
        a = np.asarray(alpha)
        if a.ndim == 3 and a.shape[2] == 1:
            a = a[:, :, 0]
        if a.shape != (h, w):
            raise ValueError(f"alpha shape {a.shape} does not match the image size {(h, w)}")
        if np.issubdtype(a.dtype, np.floating) and a.size and float(a.max()) <= 1.0:
            a = a * 255.0
        mask = a > self.threshold
        return MaskResult(mask=mask, source=self.name, details={"threshold": self.threshold, "rule": "alpha > threshold"})


@MASKERS.register("alpha", description="mask from the file's alpha channel (alpha > 127)")
def _make_alpha(**opts: Any) -> Masker:
    return AlphaMasker(**opts)


@MASKERS.register("grabcut", description="OpenCV GrabCut from a box / clicks (classical, no weights)")
def _make_grabcut(**opts: Any) -> Masker:

    return GrabCutMasker(**opts)


@MASKERS.register("sam2", description="Segment Anything 2 with click / box prompts (needs a checkpoint)")
def _make_sam2(**opts: Any) -> Masker:
    from core.inspect.masking.sam2_masker import (
        Sam2Masker,
    )  # lazy: core.inspect.masking.sam2_masker imports torch (start-up time)

    return Sam2Masker(**opts)


def list_maskers() -> list[str]:
    """Registered masker names."""
    return MASKERS.names()


def describe_maskers() -> dict[str, str]:
    """Masker name -> one-line description."""
    return MASKERS.describe()


def create_masker(name: str, **opts: Any) -> Masker:
    """Build the masker registered under ``name`` (raises UnknownComponentError on unknown names)."""
    return MASKERS.create(name, **opts)


def sam2_checkpoint_configured() -> bool:
    """True when ``ROSETTE_SAM2_CHECKPOINT`` names an existing file."""
    path = os.environ.get(SAM2_CHECKPOINT_ENV, "").strip()
    return bool(path) and os.path.isfile(os.path.expanduser(path))


def default_masker_name() -> str:
    """``"sam2"`` when a SAM 2 checkpoint is configured (env ``ROSETTE_SAM2_CHECKPOINT``), else ``"grabcut"``."""
    return "sam2" if sam2_checkpoint_configured() else "grabcut"
