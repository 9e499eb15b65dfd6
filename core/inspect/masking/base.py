"""What every masker shares: the result, the protocol, prompt checks and mask quality. The masker modules import this, not the package, whose registry imports them."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import cv2
import numpy as np
from PIL import Image

#: Default alpha cut: a pixel belongs to the animal when alpha > 127 (of 255).
ALPHA_THRESHOLD = 127
#: Default batch-mode box: the frame minus this fraction of width/height on each side.
DEFAULT_BOX_MARGIN = 0.05
#: Env var naming a SAM 2 checkpoint file (``sam2.1_hiera_tiny.pt`` ...).
SAM2_CHECKPOINT_ENV = "ROSETTE_SAM2_CHECKPOINT"
#: Env var naming a SAM 2 config shipped with the sam2 package.
SAM2_CONFIG_ENV = "ROSETTE_SAM2_CONFIG"


@dataclass
class MaskResult:
    """One mask and where it came from."""

    mask: np.ndarray  # HxW bool, same size as the image
    source: str  # masker registry name: "alpha" | "grabcut" | "sam2"
    details: dict[str, Any] = field(default_factory=dict)  # prompt, checkpoint + sha256, config, score


@runtime_checkable
class Masker(Protocol):
    """Anything that turns a photo (+ optional prompts) into a :class:`MaskResult`."""

    name: str

    def predict(
        self,
        rgb: np.ndarray,
        *,
        points: Sequence[tuple[float, float]] | None = None,
        point_labels: Sequence[int] | None = None,
        box: tuple[float, float, float, float] | None = None,
        alpha: np.ndarray | None = None,
    ) -> MaskResult: ...


# --------------------------------------------------------------------------- helpers


def as_rgb_uint8(rgb: np.ndarray) -> np.ndarray:
    """Validate an image as HxWx3 uint8 (grey HxW is stacked, a 4th channel dropped)."""
    arr = np.asarray(rgb)
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise ValueError(f"expected an HxWx3 RGB image, got shape {arr.shape}")
    arr = arr[:, :, :3]
    if arr.dtype != np.uint8:
        if np.issubdtype(arr.dtype, np.floating) and arr.size and float(np.nanmax(arr)) <= 1.0:
            arr = arr * 255.0
        arr = np.clip(np.rint(arr), 0, 255).astype(np.uint8)
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"empty image of shape {arr.shape}")
    return np.ascontiguousarray(arr)


def as_bool_mask(mask: np.ndarray, *, shape: tuple[int, int] | None = None) -> np.ndarray:
    """Validate a mask as HxW bool (HxWx1 squeezed; non-bool: nonzero = foreground)."""
    m = np.asarray(mask)
    if m.ndim == 3 and m.shape[2] == 1:
        m = m[:, :, 0]
    if m.ndim != 2:
        raise ValueError(f"expected an HxW mask, got shape {m.shape}")
    if shape is not None and m.shape != tuple(shape):
        raise ValueError(f"mask shape {m.shape} does not match the image size {tuple(shape)}")
    return m.astype(bool) if m.dtype != bool else m


def default_box(height: int, width: int, *, margin: float = DEFAULT_BOX_MARGIN) -> tuple[float, float, float, float]:
    """The batch-mode prompt: (x0, y0, x1, y1) = the frame shrunk by ``margin`` * size on each side."""
    if not 0.0 <= margin < 0.5:
        raise ValueError(f"margin must be in [0, 0.5), got {margin}")
    return (margin * width, margin * height, (1.0 - margin) * width, (1.0 - margin) * height)


def validate_prompts(
    height: int,
    width: int,
    points: Sequence[tuple[float, float]] | None,
    point_labels: Sequence[int] | None,
    box: tuple[float, float, float, float] | None,
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Check prompts and return (points Nx2 float (x, y), labels N int in {0,1}, box 4 float x0,y0,x1,y1).

    Missing ``point_labels`` mean "all positive". Points and boxes are in pixel
    coordinates of the image; boxes are clipped to the frame and must have area.
    """
    pts = lab = bx = None
    if points is not None and len(points) > 0:
        pts = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        if point_labels is None:
            lab = np.ones(len(pts), dtype=np.int64)
        else:
            lab = np.asarray(point_labels, dtype=np.int64).reshape(-1)
            if len(lab) != len(pts):
                raise ValueError(f"{len(pts)} points but {len(lab)} point labels")
            if not np.isin(lab, (0, 1)).all():
                raise ValueError("point labels must be 1 (animal) or 0 (background)")
    elif point_labels is not None and len(point_labels) > 0:
        raise ValueError("point_labels given without points")
    if box is not None:
        b = np.asarray(box, dtype=np.float64).reshape(-1)
        if b.shape != (4,):
            raise ValueError(f"box must be (x0, y0, x1, y1), got {box!r}")
        x0, x1 = sorted((float(np.clip(b[0], 0, width)), float(np.clip(b[2], 0, width))))
        y0, y1 = sorted((float(np.clip(b[1], 0, height)), float(np.clip(b[3], 0, height))))
        if x1 - x0 < 1 or y1 - y0 < 1:
            raise ValueError(f"box {box!r} has no area inside the {width}x{height} image")
        bx = np.array([x0, y0, x1, y1])
    return pts, lab, bx


# --------------------------------------------------------------------------- quality


@dataclass
class MaskQuality:
    """Summary of a mask: solidity, share of the frame, pieces, coverage of its prompt, and warning flags."""

    solidity: float
    area_fraction: float
    n_components: int
    flags: list[str]  # subset of QUALITY_FLAGS
    box_extent: tuple[float, float] | None = None  # mask's bounding box over the prompted box, (width, height)
    box_fill: float | None = None  # share of the prompted box the mask covers
    box_sides_reached: int | None = None  # sides of the prompted box the mask comes within 5 % of
    clicks_missed: int = 0  # clicks on the animal that fall outside the mask


QUALITY_FLAGS = ("empty", "full_frame", "multi_component", "short_of_box", "misses_clicks")
PARTIAL_EXTENT = 0.75  # a mask spanning less than this share of the box's width or height is likely partial


def prompt_of(details: dict[str, Any] | None) -> dict[str, Any]:
    """The prompt a masker recorded in its details, as ``mask_quality`` keywords: the box only when a person
    drew it (a default "frame minus margin" box says nothing about where the animal ends), and the clicks."""
    prompt = (details or {}).get("prompt") or {}
    box = prompt.get("box")
    if box is not None and str(prompt.get("box_source", "given")).startswith("default"):
        box = None
    return {"box": tuple(box) if box is not None else None, "points": prompt.get("points"),
            "point_labels": prompt.get("point_labels")}


def convex_hull_mask(mask: np.ndarray) -> np.ndarray:
    """Filled convex hull of all foreground pixels (HxW bool; empty stays empty)."""
    m = as_bool_mask(mask)
    out = np.zeros(m.shape, dtype=np.uint8)
    pts = cv2.findNonZero(m.astype(np.uint8))
    if pts is None:
        return out.astype(bool)
    hull = cv2.convexHull(pts)
    cv2.fillConvexPoly(out, hull, 1)
    return out.astype(bool) | m  # the rasterised hull already contains m; "| m" guards rounding


def solidity(mask: np.ndarray) -> float:
    """|M| / |hull(M)|: mask pixels over rasterised convex-hull pixels, in (0, 1]; 0.0 for empty."""
    m = as_bool_mask(mask)
    area = int(m.sum())
    if area == 0:
        return 0.0
    return area / int(convex_hull_mask(m).sum())


def mask_quality(
    mask: np.ndarray,
    *,
    box: Sequence[float] | None = None,
    points: Sequence[Sequence[float]] | None = None,
    point_labels: Sequence[int] | None = None,
    full_frame_fraction: float = 0.95,
    min_component_fraction: float = 0.01,
    partial_extent: float = PARTIAL_EXTENT,
) -> MaskQuality:
    """Solidity, area fraction and significant 8-connected pieces of a mask, its coverage of the prompt, with flags.

    - ``n_components``: 8-connected foreground components holding at least
      ``min_component_fraction`` of the foreground (specks below that do not count).
    - flags: ``empty`` (no foreground), ``full_frame`` (area fraction >=
      ``full_frame_fraction``: the masker probably took the whole photo),
      ``multi_component`` (more than one significant component),
      ``short_of_box`` (with a drawn ``box`` (x0, y0, x1, y1): the mask's bounding box spans less than
      ``partial_extent`` of the box's width or height, so head, legs or tail are likely missing; solidity
      cannot see this, a body-only ellipse is very solid), ``misses_clicks`` (a click on the animal,
      label 1 in ``point_labels``, lies outside the mask).
    """
    m = as_bool_mask(mask)
    area = int(m.sum())
    frac = area / m.size if m.size else 0.0
    n_comp = 0
    if area:
        n_labels, _, stats, _ = cv2.connectedComponentsWithStats(m.astype(np.uint8), connectivity=8)
        sizes = stats[1:n_labels, cv2.CC_STAT_AREA]
        n_comp = int((sizes >= max(1.0, min_component_fraction * area)).sum())
    flags: list[str] = []
    if area == 0:
        flags.append("empty")
    if frac >= full_frame_fraction:
        flags.append("full_frame")
    if n_comp > 1:
        flags.append("multi_component")
    extent = fill = sides = None
    if box is not None and area:
        h, w = m.shape
        x0, x1 = sorted((float(np.clip(box[0], 0, w)), float(np.clip(box[2], 0, w))))
        y0, y1 = sorted((float(np.clip(box[1], 0, h)), float(np.clip(box[3], 0, h))))
        bw, bh = max(x1 - x0, 1.0), max(y1 - y0, 1.0)
        inside = m[int(np.floor(y0)):int(np.ceil(y1)), int(np.floor(x0)):int(np.ceil(x1))]
        fill = float(inside.sum() / (bw * bh)) if inside.size else 0.0
        ys, xs = np.nonzero(inside)
        if ys.size:
            mx0, mx1 = xs.min() + np.floor(x0), xs.max() + 1 + np.floor(x0)
            my0, my1 = ys.min() + np.floor(y0), ys.max() + 1 + np.floor(y0)
            extent = (float((mx1 - mx0) / bw), float((my1 - my0) / bh))
            tol_x, tol_y = max(2.0, 0.05 * bw), max(2.0, 0.05 * bh)
            sides = int(mx0 - x0 <= tol_x) + int(x1 - mx1 <= tol_x) + int(my0 - y0 <= tol_y) + int(y1 - my1 <= tol_y)
        else:
            extent, sides = (0.0, 0.0), 0
        if min(extent) < partial_extent:
            flags.append("short_of_box")
    missed = 0
    if points is not None and area:
        labels = list(point_labels) if point_labels is not None else [1] * len(points)
        h, w = m.shape
        for (x, y), label in zip(points, labels):
            xi, yi = int(np.clip(round(float(x)), 0, w - 1)), int(np.clip(round(float(y)), 0, h - 1))
            missed += int(label == 1 and not m[yi, xi])
        if missed:
            flags.append("misses_clicks")
    return MaskQuality(solidity=solidity(m), area_fraction=float(frac), n_components=n_comp, flags=flags,
                       box_extent=extent, box_fill=fill, box_sides_reached=sides, clicks_missed=missed)


# --------------------------------------------------------------------------- PNG storage


def encode_mask_png(mask: np.ndarray) -> bytes:
    """Store an HxW mask as a 1-bit PNG (foreground = white)."""
    m = as_bool_mask(mask)
    buf = io.BytesIO()
    Image.fromarray(m).convert("1").save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def decode_mask_png(data: bytes) -> np.ndarray:
    """Read a mask PNG (1-bit, 8-bit grey, palette or RGB) into HxW bool: grey > 127.

    Images with an alpha channel (LA/RGBA) are read from the alpha channel, as
    in Kaggle-style cut-outs.
    """
    with Image.open(io.BytesIO(data)) as im:
        im.load()
        if im.mode == "1":
            return np.asarray(im, dtype=bool).copy()
        if im.mode in ("LA", "RGBA", "PA") or (im.mode == "P" and "transparency" in im.info):
            return np.asarray(im.convert("RGBA"))[:, :, 3] > ALPHA_THRESHOLD
        if im.mode in ("I", "I;16", "I;16B", "F"):
            arr = np.asarray(im).astype(np.float64)
            top = 65535.0 if arr.max(initial=0) > 255 else 255.0
            return arr > top / 2
        return np.asarray(im.convert("L")) > ALPHA_THRESHOLD


# --------------------------------------------------------------------------- maskers + registry
