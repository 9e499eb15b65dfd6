"""Annotations: one animal in a photo, as a normalised box (docs/DESIGN.md section 8).

A box is (x, y, w, h) in [0, 1], origin top-left, as MegaDetector's ``bbox`` and Camtrap DP's
``bboxX/bboxY/bboxWidth/bboxHeight`` give it. Everything about the animal reads the annotation's
*crop*: the box grown by a margin on every side (part of the backbone config and its fingerprint),
clipped to the frame. A single-animal photo has one whole-photo annotation, whose crop is the photo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Each side of the box grows by this share of the box's own width / height before cropping.
CROP_MARGIN = 0.1

#: Where a box came from (``detector:<name>`` for a detector run inside Rosette).
BOX_SOURCES = ("whole-photo", "drawn", "megadetector", "camtrap-dp")
#: Sources a curator owns: a machine box never replaces one of these.
CURATOR_SOURCES = ("drawn",)

_EPS = 1e-6


class InvalidBoxError(ValueError):
    """A box outside [0, 1] or with no area; the message names the box."""


def check_box_source(source: str) -> str:
    """``source`` if it is a known box source (or ``detector:<name>``), else ValueError naming the known ones."""
    if source in BOX_SOURCES or (source.startswith("detector:") and len(source) > len("detector:")):
        return source
    raise ValueError(f"unknown box source {source!r}; known: {', '.join(BOX_SOURCES)}, detector:<name>")


@dataclass(frozen=True)
class Box:
    """A normalised box: x, y of the top-left corner, width and height, each a share of the frame."""

    x: float
    y: float
    w: float
    h: float

    def __post_init__(self) -> None:
        vals = (self.x, self.y, self.w, self.h)
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in vals):
            raise InvalidBoxError(f"box {list(vals)} has a value that is not a finite number")
        for name in ("x", "y", "w", "h"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.w <= 0 or self.h <= 0:
            raise InvalidBoxError(f"box {self.as_list()} has zero area (width and height must be above 0)")
        if self.x < -_EPS or self.y < -_EPS or self.x + self.w > 1 + _EPS or self.y + self.h > 1 + _EPS:
            raise InvalidBoxError(f"box {self.as_list()} lies outside the frame: x, y, x + width and y + height "
                                  "must be within [0, 1] (normalised, origin top-left)")

    @classmethod
    def from_sequence(cls, values: object) -> Box:
        """[x, y, w, h] (MegaDetector's order) -> Box; anything else is an InvalidBoxError."""
        if not isinstance(values, (list, tuple)) or len(values) != 4:
            raise InvalidBoxError(f"a box is [x, y, width, height], got {values!r}")
        try:
            return cls(*(float(v) for v in values))
        except (TypeError, ValueError) as exc:
            if isinstance(exc, InvalidBoxError):
                raise
            raise InvalidBoxError(f"a box is four numbers [x, y, width, height], got {values!r}") from None

    def as_list(self) -> list[float]:
        return [round(self.x, 6), round(self.y, 6), round(self.w, 6), round(self.h, 6)]

    @property
    def is_whole(self) -> bool:
        return self.x <= _EPS and self.y <= _EPS and self.w >= 1 - _EPS and self.h >= 1 - _EPS

    @property
    def area(self) -> float:
        return self.w * self.h

    def iou(self, other: Box) -> float:
        """Intersection over union of two boxes (0 when they do not touch)."""
        ix = max(0.0, min(self.x + self.w, other.x + other.w) - max(self.x, other.x))
        iy = max(0.0, min(self.y + self.h, other.y + other.h) - max(self.y, other.y))
        inter = ix * iy
        union = self.area + other.area - inter
        return inter / union if union > 0 else 0.0

    def key(self) -> str:
        """A short, stable text for cache keys (six decimals, as stored)."""
        return "_".join(f"{v:.6f}" for v in (self.x, self.y, self.w, self.h))


WHOLE_PHOTO = Box(0.0, 0.0, 1.0, 1.0)


def crop_rect(box: Box, width: int, height: int, *, margin: float = CROP_MARGIN) -> tuple[int, int, int, int]:
    """Pixel rectangle (left, top, right, bottom) of the box grown by ``margin`` on every side, clipped to a
    ``width`` x ``height`` frame; never empty (at least one pixel each way)."""
    if width < 1 or height < 1:
        raise ValueError(f"frame size must be positive, got {width} x {height}")
    if margin < 0:
        raise ValueError(f"crop margin must be >= 0, got {margin}")
    if box.is_whole:
        return 0, 0, width, height
    x0 = (box.x - margin * box.w) * width
    y0 = (box.y - margin * box.h) * height
    x1 = (box.x + box.w * (1 + margin)) * width
    y1 = (box.y + box.h * (1 + margin)) * height
    left = min(max(0, math.floor(x0)), width - 1)
    top = min(max(0, math.floor(y0)), height - 1)
    right = max(min(width, math.ceil(x1)), left + 1)
    bottom = max(min(height, math.ceil(y1)), top + 1)
    return left, top, right, bottom


def crop_array(rgb: np.ndarray, box: Box, *, margin: float = CROP_MARGIN) -> np.ndarray:
    """The annotation's crop of an H x W (x C) array (the array itself for a whole-photo box)."""
    if box.is_whole:
        return rgb
    left, top, right, bottom = crop_rect(box, rgb.shape[1], rgb.shape[0], margin=margin)
    return np.ascontiguousarray(rgb[top:bottom, left:right])


def box_prompt(box: Box, crop_shape: tuple[int, ...], *, margin: float = CROP_MARGIN
               ) -> tuple[float, float, float, float] | None:
    """The masker's box prompt (x0, y0, x1, y1 in the crop's pixels) for an annotation: its own box inside its
    crop; None for a whole-photo annotation (the masker's default prompt then covers the photo)."""
    if box.is_whole:
        return None
    x, y, w, h = box_in_crop(box, box, margin=margin)
    ch, cw = crop_shape[0], crop_shape[1]
    return (max(0.0, x * cw), max(0.0, y * ch), min(float(cw), (x + w) * cw), min(float(ch), (y + h) * ch))


def box_in_crop(box: Box, crop: Box, *, margin: float = CROP_MARGIN) -> tuple[float, float, float, float]:
    """Where ``box`` lies inside ``crop``'s cut (both in frame coordinates) as shares of the cut; used to draw
    a box on a crop. Not clipped: a box partly outside the cut gives values outside [0, 1]."""
    cx0 = max(0.0, crop.x - margin * crop.w)
    cy0 = max(0.0, crop.y - margin * crop.h)
    cx1 = min(1.0, crop.x + crop.w * (1 + margin))
    cy1 = min(1.0, crop.y + crop.h * (1 + margin))
    cw, ch = cx1 - cx0, cy1 - cy0
    return (box.x - cx0) / cw, (box.y - cy0) / ch, box.w / cw, box.h / ch


#: MegaDetector's categories (batch output format 1.x), by the names Rosette uses.
DETECTION_CATEGORIES = {"1": "animal", "2": "person", "3": "vehicle"}
#: MegaDetector's recommended threshold for animals (and Rosette's default --min-confidence).
DEFAULT_MIN_CONFIDENCE = 0.2


@dataclass(frozen=True)
class Detection:
    """One machine box: ``category`` is ``animal``, ``person`` or ``vehicle``; ``confidence`` in [0, 1]."""

    category: str
    box: Box
    confidence: float
