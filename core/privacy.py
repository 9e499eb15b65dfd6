"""Privacy: obscure people in camera-trap photos before anyone else sees them.

:func:`blur_boxes` pixelates each box (about :data:`BLOCKS_ACROSS` blocks across the box's short side) and then
blurs it, so a face or a body cannot be recognised; nothing outside the boxes changes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from PIL import Image, ImageFilter, ImageStat

from core.annotations import Box

#: Blocks across a box's short side after pixelation.
BLOCKS_ACROSS = 8
#: A box whose short side is below this many pixels is filled with its mean colour (too small to pixelate).
MIN_PIXELATE_PX = 2 * BLOCKS_ACROSS
#: Modes blurred as they are; other modes are converted first (to RGBA when they carry transparency, else RGB).
NATIVE_MODES = ("RGB", "RGBA", "L", "LA")


def box_pixels(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """Pixel rectangle (left, top, right, bottom) covering the box, rounded outwards, clipped to the frame and
    never empty."""
    left = min(max(0, math.floor(box.x * width + 1e-9)), width - 1)
    top = min(max(0, math.floor(box.y * height + 1e-9)), height - 1)
    right = max(min(width, math.ceil((box.x + box.w) * width - 1e-9)), left + 1)
    bottom = max(min(height, math.ceil((box.y + box.h) * height - 1e-9)), top + 1)
    return left, top, right, bottom


def _obscure(region: Image.Image) -> Image.Image:
    w, h = region.size
    short = min(w, h)
    if short < MIN_PIXELATE_PX:
        mean = tuple(round(v) for v in ImageStat.Stat(region).mean)
        return Image.new(region.mode, region.size, mean if len(mean) > 1 else mean[0])
    block = short / BLOCKS_ACROSS
    small = region.resize((max(1, round(w / block)), max(1, round(h / block))), Image.Resampling.BOX)
    out = small.resize((w, h), Image.Resampling.NEAREST)
    return out.filter(ImageFilter.GaussianBlur(radius=block / 2))


def blur_boxes(img: Image.Image, boxes: Sequence[Box]) -> Image.Image:
    """A copy of ``img`` with each box pixelated and blurred beyond recognition; the rest is untouched.

    RGB, RGBA, L and LA images keep their mode; other modes come back as RGB (RGBA when transparent).
    """
    if img.mode in NATIVE_MODES:
        out = img.copy()
    else:
        transparent = "A" in img.getbands() or "transparency" in img.info
        out = img.convert("RGBA" if transparent else "RGB")
    width, height = out.size
    for box in boxes:
        rect = box_pixels(box, width, height)
        out.paste(_obscure(out.crop(rect)), rect[:2])
    return out
