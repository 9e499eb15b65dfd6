"""Privacy: obscure people in camera-trap photos before anyone else sees them.

:func:`blur_boxes` pixelates each box (about :data:`BLOCKS_ACROSS` blocks across the box's short side) and then
blurs it, so a face or a body cannot be recognised; nothing outside the boxes changes. :func:`blurred_file` does
the same to a whole photo file for what leaves Rosette (exports), keeping its format and EXIF.
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image, ImageFilter, ImageOps, ImageStat

from core.annotations import Box, InvalidBoxError

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


#: What an export does with the photos that show people: ``blur`` their person boxes (the default: the screens'
#: blur), ``omit`` the photos, or ``keep`` the originals (only when chosen, and audited).
PEOPLE_CHOICES = ("blur", "omit", "keep")
DEFAULT_PEOPLE = "blur"
#: Formats a blurred copy is written in as they came; any other is written as PNG (lossless).
WRITABLE_FORMATS = {"JPEG": "JPEG", "MPO": "JPEG", "PNG": "PNG", "TIFF": "TIFF", "WEBP": "WEBP", "BMP": "BMP",
                    "GIF": "GIF"}


def check_people_choice(choice: str) -> str:
    """``choice`` when it is one of :data:`PEOPLE_CHOICES`; a ValueError naming them otherwise."""
    if choice not in PEOPLE_CHOICES:
        raise ValueError(f"people: {choice!r} is not one of {', '.join(PEOPLE_CHOICES)} (blur is the default; keep "
                         "exports the people as photographed and is recorded in the audit trail)")
    return choice


def person_boxes(rows: Sequence[Sequence[Any]] | None) -> list[Box]:
    """The boxes of stored person rows (``[x, y, w, h, confidence]``, as a photo keeps them); a row that is not a
    box is skipped."""
    out = []
    for row in rows or []:
        try:
            out.append(Box.from_sequence(list(row[:4])))
        except (InvalidBoxError, TypeError):
            continue
    return out


def blurred_format(fmt: str | None) -> str:
    """The format a blurred copy of a ``fmt`` file is written in."""
    return WRITABLE_FORMATS.get((fmt or "").upper(), "PNG")


def blurred_file(source: str | Path, boxes: Sequence[Box]) -> bytes:
    """The bytes of the photo file ``source`` with each box blurred as :func:`blur_boxes` does.

    Boxes are in the upright photo's coordinates (EXIF orientation applied, as every screen shows it), so the
    copy is written upright, its EXIF kept (time, camera, GPS) with the orientation reset; its format is
    :func:`blurred_format` of the original's."""
    with Image.open(source) as opened:
        fmt = blurred_format(opened.format)
        upright = ImageOps.exif_transpose(opened)
        exif = upright.getexif()
        icc = opened.info.get("icc_profile")
    out = blur_boxes(upright, boxes)
    if fmt == "JPEG" and out.mode not in ("RGB", "L", "CMYK"):
        out = out.convert("RGB")
    options: dict[str, Any] = {"exif": exif.tobytes()} if len(exif) and fmt in ("JPEG", "PNG", "WEBP") else {}
    if icc and fmt in ("JPEG", "PNG", "TIFF", "WEBP") and out.mode == upright.mode:  # a colour profile fits its mode
        options["icc_profile"] = icc
    if fmt == "JPEG":
        options.update(quality=95, subsampling=0)
    buf = io.BytesIO()
    out.save(buf, format=fmt, **options)
    return buf.getvalue()
