"""GrabCut masker: OpenCV's graph-cut segmentation, the weight-free fallback.

Deterministic (OpenCV's RNG is re-seeded before every call). The photo is worked on at ``work_max_side`` (about
1 s per photo on one core); the box, or the frame minus ``margin``, seeds probable foreground, clicks paint
definite foreground or background, and the mask is upsampled with smooth edges.

The procedure step by step: docs/inspect.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from core.inspect.masking.base import DEFAULT_BOX_MARGIN, MaskResult, as_rgb_uint8, default_box, validate_prompts

__all__ = ["GrabCutMasker", "grabcut_mask"]


def grabcut_mask(
    rgb: np.ndarray,
    *,
    box: tuple[float, float, float, float] | None = None,
    points: Sequence[tuple[float, float]] | None = None,
    point_labels: Sequence[int] | None = None,
    iterations: int = 5,
    margin: float = DEFAULT_BOX_MARGIN,
    work_max_side: int = 256,
    point_radius_fraction: float = 0.015,
    seed: int = 0,
) -> tuple[np.ndarray, dict[str, Any]]:
    """GrabCut foreground mask (HxW bool) and the provenance details of the run."""
    img = as_rgb_uint8(rgb)
    h, w = img.shape[:2]
    pts, lab, bx = validate_prompts(h, w, points, point_labels, box)
    box_source = "given"
    if bx is None:
        bx = np.asarray(default_box(h, w, margin=margin))
        box_source = f"default: frame minus {margin:g} of each side"

    scale = min(1.0, work_max_side / max(h, w)) if work_max_side else 1.0
    wh, ww = max(1, round(h * scale)), max(1, round(w * scale))
    work = img if scale == 1.0 else cv2.resize(img, (ww, wh), interpolation=cv2.INTER_AREA)
    sy, sx = wh / h, ww / w

    labels = np.full((wh, ww), cv2.GC_BGD, dtype=np.uint8)
    x0, y0 = int(np.floor(bx[0] * sx)), int(np.floor(bx[1] * sy))
    x1, y1 = int(np.ceil(bx[2] * sx)), int(np.ceil(bx[3] * sy))
    x0, y0 = min(max(x0, 0), ww - 1), min(max(y0, 0), wh - 1)
    x1, y1 = max(min(x1, ww), x0 + 1), max(min(y1, wh), y0 + 1)
    labels[y0:y1, x0:x1] = cv2.GC_PR_FGD
    if not (labels == cv2.GC_BGD).any():  # the box covers the whole frame
        labels[0, :] = labels[-1, :] = cv2.GC_PR_BGD
        labels[:, 0] = labels[:, -1] = cv2.GC_PR_BGD
    if pts is not None:
        radius = max(2, round(point_radius_fraction * max(wh, ww)))
        for (px, py), lb in zip(pts, lab):
            centre = (int(round(px * sx)), int(round(py * sy)))
            cv2.circle(labels, centre, radius, int(cv2.GC_FGD if lb == 1 else cv2.GC_BGD), thickness=-1)
    fg_like = (labels == cv2.GC_FGD) | (labels == cv2.GC_PR_FGD)
    bg_like = (labels == cv2.GC_BGD) | (labels == cv2.GC_PR_BGD)
    if not fg_like.any() or not bg_like.any():
        # GrabCut needs samples of both models; degenerate prompts give the prompt itself.
        small = fg_like
    else:
        cv2.setRNGSeed(int(seed))
        bgd_model = np.zeros((1, 65), np.float64)
        fgd_model = np.zeros((1, 65), np.float64)
        cv2.grabCut(work, labels, None, bgd_model, fgd_model, int(iterations), cv2.GC_INIT_WITH_MASK)
        small = (labels == cv2.GC_FGD) | (labels == cv2.GC_PR_FGD)

    if (wh, ww) == (h, w):
        mask = small.copy()
    else:
        up = cv2.resize(small.astype(np.uint8) * 255, (w, h), interpolation=cv2.INTER_LINEAR)
        mask = up > 127
    details: dict[str, Any] = {
        "prompt": {
            "box": [round(float(v), 2) for v in bx],
            "box_source": box_source,
            "points": None if pts is None else pts.round(2).tolist(),
            "point_labels": None if lab is None else lab.tolist(),
        },
        "iterations": int(iterations),
        "work_size": [wh, ww],
        "seed": int(seed),
        "method": "cv2.grabCut GC_INIT_WITH_MASK",
    }
    return mask, details


class GrabCutMasker:
    """GrabCut as a :class:`~core.inspect.masking.Masker` (registry name ``grabcut``)."""

    name = "grabcut"

    def __init__(
        self,
        *,
        iterations: int = 5,
        margin: float = DEFAULT_BOX_MARGIN,
        work_max_side: int = 256,
        point_radius_fraction: float = 0.015,
        seed: int = 0,
    ) -> None:
        if iterations < 1:
            raise ValueError("iterations must be >= 1")
        self.options = {
            "iterations": int(iterations),
            "margin": float(margin),
            "work_max_side": int(work_max_side),
            "point_radius_fraction": float(point_radius_fraction),
            "seed": int(seed),
        }

    def predict(
        self,
        rgb: np.ndarray,
        *,
        points: Sequence[tuple[float, float]] | None = None,
        point_labels: Sequence[int] | None = None,
        box: tuple[float, float, float, float] | None = None,
        alpha: np.ndarray | None = None,
    ) -> MaskResult:
        """Segment ``rgb`` from ``box`` (default: centred margin) refined by clicks; ``alpha`` is ignored."""
        mask, details = grabcut_mask(rgb, box=box, points=points, point_labels=point_labels, **self.options)
        details["margin"] = self.options["margin"]
        return MaskResult(mask=mask, source=self.name, details=details)
