"""Decoding photos safely: bytes in, 8-bit RGB (+ alpha) and metadata out.

Pure functions over bytes and PIL images (no database). A photo is refused before its pixels are decoded when it
is empty, not an image, or announces more than ``MAX_PIXELS`` pixels (a decompression bomb), with an
:class:`ImageDecodeError` in curator words; then it is decoded fully, converted to 8-bit RGB (:func:`to_rgb8`,
alpha kept apart: in Kaggle-style cut-outs it is the mask), turned by its EXIF orientation, and its EXIF
date/time and GPS are read.

The steps in order: docs/io.md."""

from __future__ import annotations

import io
import os
import struct
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from core.annotations import CROP_MARGIN, Box, crop_rect

#: Largest photo accepted, in pixels (width x height as announced by the file header),
#: checked before any pixel is decoded. 100 megapixels is far above any camera-trap or
#: DSLR photo (a 45 MP camera gives 8256 x 5504) and about 400 MB of RGBA in memory.
MAX_PIXELS = 100_000_000

# EXIF tags (TIFF/EXIF 2.32 numbering)
_TAG_ORIENTATION = 0x0112
_TAG_DATETIME = 0x0132
_TAG_EXIF_IFD = 0x8769
_TAG_GPS_IFD = 0x8825
_TAG_DATETIME_ORIGINAL = 0x9003
_TAG_DATETIME_DIGITIZED = 0x9004
_TAG_OFFSET_TIME_ORIGINAL = 0x9011
_GPS_LAT_REF, _GPS_LAT, _GPS_LON_REF, _GPS_LON = 1, 2, 3, 4

#: EXIF orientation -> PIL transpose turning the stored pixels upright.
_ORIENTATION_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


class ImageDecodeError(ValueError):
    """A file that cannot be imported as a photo; the message says why in curator words."""


@dataclass
class DecodedImage:
    """A decoded photo: upright 8-bit RGB, the alpha channel if any, and what the file said."""

    image: Image.Image  # RGB, EXIF orientation applied, 8-bit
    alpha: np.ndarray | None  # HxW uint8 alpha after orientation, when the file had an alpha channel
    format: str  # original file format (JPEG, PNG, ...)
    mode: str  # original PIL mode (RGB, RGBA, I;16, CMYK, ...)
    width: int  # after orientation
    height: int  # after orientation
    exif_time: str | None = None  # ISO 8601 from DateTimeOriginal (else DateTimeDigitized / DateTime)
    gps_lat: float | None = None  # decimal degrees, south negative
    gps_lon: float | None = None  # decimal degrees, west negative
    orientation: int = 1  # EXIF orientation that was applied (1 = none)

    @property
    def has_transparency(self) -> bool:
        """True when the alpha channel is not fully opaque (so it carries a mask)."""
        return self.alpha is not None and bool((self.alpha < 255).any())


def _label(name: str) -> str:
    return f"{name}: " if name else ""


def _bomb_message(name: str, max_pixels: int, size: tuple[int, int] | None = None) -> str:
    said = (f"says it is {size[0]:,} x {size[1]:,} pixels ({size[0] * size[1] / 1e6:,.0f} megapixels), above"
            if size else "announces a picture far above")
    return (f"{_label(name)}refused: the file {said} the safety limit of {max_pixels / 1e6:,.0f} megapixels "
            f"(possible decompression bomb: a small file that would fill the memory)")


def _open_checked(data: bytes | os.PathLike[str], *, name: str, max_pixels: int) -> Image.Image:
    """Open (header only) and refuse empty, non-image and oversized files before decoding pixels. ``data``: the
    file's bytes, or the path of a file too large to hold in memory (PIL reads it as it decodes)."""
    is_bytes = isinstance(data, (bytes, bytearray, memoryview))
    if (not data) if is_bytes else os.path.getsize(data) == 0:
        raise ImageDecodeError(f"{_label(name)}the file is empty (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(io.BytesIO(data) if is_bytes else os.fspath(data))
    except Image.DecompressionBombError:
        raise ImageDecodeError(_bomb_message(name, max_pixels)) from None
    except UnidentifiedImageError:
        raise ImageDecodeError(f"{_label(name)}not a picture Rosette can read (not JPEG, PNG, TIFF, WebP, BMP or GIF, or badly damaged)") from None
    except (OSError, SyntaxError, ValueError, EOFError) as exc:
        raise ImageDecodeError(f"{_label(name)}the file is damaged and cannot be read ({exc})") from None
    w, h = img.size
    if w <= 0 or h <= 0:
        raise ImageDecodeError(f"{_label(name)}the picture has no pixels ({w} x {h})")
    if w * h > max_pixels:
        raise ImageDecodeError(_bomb_message(name, max_pixels, (w, h)))
    return img


def _load_pixels(img: Image.Image, *, name: str) -> None:
    prev = ImageFile.LOAD_TRUNCATED_IMAGES
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            if prev:  # never accept truncated files silently
                ImageFile.LOAD_TRUNCATED_IMAGES = False
            img.load()
    except Image.DecompressionBombError:
        raise ImageDecodeError(_bomb_message(name, MAX_PIXELS)) from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError, struct.error) as exc:
        raise ImageDecodeError(f"{_label(name)}the file is damaged or incomplete and cannot be decoded ({exc})") from None
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = prev


# --------------------------------------------------------------------------- modes


def _scale_to_uint8(arr: np.ndarray) -> np.ndarray:
    """Integer/float pixels -> uint8 by *scaling*, never clipping.

    - values already in [0, 255] (integers): kept;
    - integers in [0, 65535] (16-bit): ``round(v * 255 / 65535)``;
    - floats in [0, 1]: ``round(v * 255)``;
    - anything else: min-max stretch ``(v - min) / (max - min) * 255``.
    """
    a = np.asarray(arr)
    if a.size == 0:
        return a.astype(np.uint8)
    lo, hi = float(a.min()), float(a.max())
    if np.issubdtype(a.dtype, np.integer):
        if lo >= 0 and hi <= 255:
            return a.astype(np.uint8)
        if lo >= 0 and hi <= 65535:
            return np.round(a.astype(np.float32) * (255.0 / 65535.0)).astype(np.uint8)
    else:
        a = np.nan_to_num(a.astype(np.float64), nan=0.0, posinf=hi if np.isfinite(hi) else 0.0, neginf=0.0)
        lo, hi = float(a.min()), float(a.max())
        if lo >= 0 and hi <= 1.0:
            return np.round(a * 255.0).astype(np.uint8)
        if lo >= 0 and hi <= 255 and np.allclose(a, np.round(a)):
            return a.astype(np.uint8)
    if hi <= lo:
        return np.zeros(a.shape, dtype=np.uint8)
    return np.round((a.astype(np.float64) - lo) * (255.0 / (hi - lo))).astype(np.uint8)


def to_rgb8(img: Image.Image) -> Image.Image:
    """Any PIL mode -> 8-bit RGB.

    RGBA/LA/PA/RGBa/La and P (with or without transparency) drop the alpha (the
    colour under transparent pixels is kept, not composited); CMYK, YCbCr, LAB,
    HSV, L and 1 use PIL's conversions; 16/32-bit integer (``I;16*``, ``I``) and
    float (``F``) greys are *scaled* to 0-255 (see :func:`_scale_to_uint8`: a
    16-bit value v becomes round(v * 255 / 65535)), never clipped.
    """
    mode = img.mode
    if mode == "RGB":
        return img
    if mode in ("RGBA", "RGBX", "CMYK", "YCbCr", "LAB", "HSV", "L"):
        return img.convert("RGB")
    if mode in ("P", "PA", "LA", "La", "RGBa"):
        return img.convert("RGBA").convert("RGB")
    if mode == "1":
        return img.convert("L").convert("RGB")
    if mode.startswith("I") or mode == "F":
        arr = np.asarray(img)
        if arr.ndim == 3:  # e.g. 16-bit RGB read as a multi-channel array
            return Image.fromarray(_scale_to_uint8(arr[:, :, :3]), "RGB")
        grey = _scale_to_uint8(arr)
        return Image.fromarray(grey, "L").convert("RGB")
    try:
        return img.convert("RGB")
    except (ValueError, OSError) as exc:
        raise ImageDecodeError(f"unsupported colour mode {mode!r} ({exc})") from None


def _alpha_of(img: Image.Image) -> np.ndarray | None:
    """HxW uint8 alpha when the image has an alpha channel or palette transparency, else None."""
    mode = img.mode
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        return np.asarray(img.getchannel("A"), dtype=np.uint8).copy()
    if mode == "P" and "transparency" in img.info:
        return np.asarray(img.convert("RGBA").getchannel("A"), dtype=np.uint8).copy()
    if mode in ("L", "RGB", "I", "I;16") and "transparency" in img.info:
        # a single colour key marks transparent pixels (tRNS chunk in PNG)
        try:
            return np.asarray(img.convert("RGBA").getchannel("A"), dtype=np.uint8).copy()
        except (ValueError, OSError):
            return None
    return None


# --------------------------------------------------------------------------- EXIF


def _exif_time(exif: Any) -> str | None:
    """``YYYY:MM:DD HH:MM:SS`` -> ``YYYY-MM-DDTHH:MM:SS`` (+ offset when recorded)."""
    try:
        sub = exif.get_ifd(_TAG_EXIF_IFD)
    except Exception:  # pragma: no cover - malformed EXIF
        sub = {}
    offset = None
    for raw, from_sub in ((sub.get(_TAG_DATETIME_ORIGINAL), True), (sub.get(_TAG_DATETIME_DIGITIZED), True),
                          (exif.get(_TAG_DATETIME), False)):
        if isinstance(raw, bytes):
            raw = raw.decode("ascii", "ignore")
        if not isinstance(raw, str):
            continue
        s = raw.strip().strip("\x00")
        if len(s) < 19 or s.startswith("0000"):
            continue
        date, _, time = s[:19].partition(" ")
        parts = date.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts) or len(time) != 8:
            continue
        iso = f"{parts[0]}-{parts[1]}-{parts[2]}T{time}"
        if from_sub:
            offset = sub.get(_TAG_OFFSET_TIME_ORIGINAL)
            if isinstance(offset, str) and len(offset.strip()) == 6 and offset.strip()[0] in "+-":
                iso += offset.strip()
        return iso
    return None


def _dms_to_degrees(value: Any) -> float | None:
    try:
        if isinstance(value, (int, float)):
            return float(value)
        parts = [float(v) for v in value]
    except (TypeError, ValueError, ZeroDivisionError):
        return None
    if not parts:
        return None
    while len(parts) < 3:
        parts.append(0.0)
    deg = parts[0] + parts[1] / 60.0 + parts[2] / 3600.0
    return deg if np.isfinite(deg) else None


def _exif_gps(exif: Any) -> tuple[float | None, float | None]:
    try:
        gps = exif.get_ifd(_TAG_GPS_IFD)
    except Exception:  # pragma: no cover - malformed EXIF
        return None, None
    if not gps:
        return None, None
    lat = _dms_to_degrees(gps.get(_GPS_LAT)) if _GPS_LAT in gps else None
    lon = _dms_to_degrees(gps.get(_GPS_LON)) if _GPS_LON in gps else None
    if lat is not None and str(gps.get(_GPS_LAT_REF, "N")).strip().upper().startswith("S"):
        lat = -lat
    if lon is not None and str(gps.get(_GPS_LON_REF, "E")).strip().upper().startswith("W"):
        lon = -lon
    if lat is not None and not -90.0 <= lat <= 90.0:
        lat = None
    if lon is not None and not -180.0 <= lon <= 180.0:
        lon = None
    return lat, lon


def _orientation(exif: Any) -> int:
    try:
        o = int(exif.get(_TAG_ORIENTATION, 1) or 1)
    except (TypeError, ValueError):
        return 1
    return o if o in _ORIENTATION_TRANSPOSE else 1


# --------------------------------------------------------------------------- public API


def decode_image(data: bytes | os.PathLike[str], *, name: str = "", max_pixels: int = MAX_PIXELS) -> DecodedImage:
    """Decode photo bytes (or a photo file: a large one is read as it decodes, never whole) into an upright 8-bit
    RGB image, its alpha channel and EXIF facts.

    Raises :class:`ImageDecodeError` for an empty file, a non-image, a header
    announcing more than ``max_pixels`` pixels (checked *before* decoding), or a
    damaged/truncated file. Multi-frame files (GIF, TIFF pages) use the first frame.
    """
    img = _open_checked(data, name=name, max_pixels=max_pixels)
    fmt = img.format or "unknown"
    mode = img.mode
    _load_pixels(img, name=name)
    try:
        exif = img.getexif()
    except Exception:  # malformed EXIF must not block an otherwise good photo
        exif = Image.Exif()
    orientation = _orientation(exif)
    exif_time = _exif_time(exif)
    gps_lat, gps_lon = _exif_gps(exif)
    try:
        alpha = _alpha_of(img)
        rgb = to_rgb8(img)
    except ImageDecodeError as exc:
        raise ImageDecodeError(f"{_label(name)}{exc}") from None
    except (OSError, ValueError) as exc:
        raise ImageDecodeError(f"{_label(name)}the colours could not be converted ({exc})") from None
    if orientation != 1:
        method = _ORIENTATION_TRANSPOSE[orientation]
        rgb = rgb.transpose(method)
        if alpha is not None:
            alpha = np.asarray(Image.fromarray(alpha, "L").transpose(method)).copy()
    return DecodedImage(
        image=rgb, alpha=alpha, format=fmt, mode=mode, width=rgb.width, height=rgb.height,
        exif_time=exif_time, gps_lat=gps_lat, gps_lon=gps_lon, orientation=orientation,
    )


def load_rgb(source: bytes | str | os.PathLike[str], *, max_side: int | None = None,
             max_pixels: int = MAX_PIXELS, draft: int | None = None) -> np.ndarray:
    """HxWx3 uint8 upright RGB from bytes or a file path.

    With ``max_side`` the longest edge is at most ``max_side`` pixels; JPEGs are
    then decoded in *draft* mode (DCT scaling by 1/2, 1/4 or 1/8 while decoding,
    keeping at least ``max_side`` pixels) which is several times faster than a
    full decode followed by a resize.

    With ``draft`` (and no ``max_side``) a JPEG is decoded at the smallest DCT scale
    (1, 1/2, 1/4, 1/8) that keeps *both* sides at least ``draft`` pixels, and not resized
    further: for a model input of S pixels, ``draft=2*S`` leaves the model's own resize
    to do the rest (see :func:`draft_size`). Photos under 2x``draft`` a side decode as without it.
    """
    data = source if isinstance(source, (bytes, bytearray, memoryview)) else open(os.fspath(source), "rb").read()
    name = "" if isinstance(source, (bytes, bytearray, memoryview)) else os.path.basename(os.fspath(source))
    img = _open_checked(bytes(data), name=name, max_pixels=max_pixels)
    want = max_side or draft
    if want and img.format == "JPEG" and img.mode in ("RGB", "L", "CMYK", "YCbCr"):
        img.draft("RGB" if img.mode != "L" else "L", (want, want))
    _load_pixels(img, name=name)
    try:
        orientation = _orientation(img.getexif())
    except Exception:
        orientation = 1
    rgb = to_rgb8(img)
    if orientation != 1:
        rgb = rgb.transpose(_ORIENTATION_TRANSPOSE[orientation])
    if max_side and max(rgb.size) > max_side:
        scale = max_side / max(rgb.size)
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        rgb = rgb.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
    return np.asarray(rgb, dtype=np.uint8).copy()


def draft_size(input_size: tuple[int, int] | int) -> int:
    """The ``draft`` for :func:`load_rgb` in front of a model with ``input_size`` (H, W): twice its longer side,
    so the DCT-scaled photo is still at least 2x the input and the model's antialiased resize keeps its look."""
    side = max(input_size) if isinstance(input_size, tuple) else int(input_size)
    return 2 * int(side)


def make_thumbnail(img: Image.Image, *, size: int = 256, quality: int = 85) -> bytes:
    """JPEG bytes of ``img`` fitted inside ``size`` x ``size`` (aspect kept, never enlarged)."""
    thumb = to_rgb8(img).copy()
    thumb.thumbnail((size, size), Image.Resampling.BICUBIC, reducing_gap=1.0)
    buf = io.BytesIO()
    thumb.save(buf, format="JPEG", quality=quality, optimize=False)
    return buf.getvalue()


#: File extension used to store each decoded format (the format, not the client's name, decides).
FORMAT_EXTENSIONS = {
    "JPEG": ".jpg", "MPO": ".jpg", "PNG": ".png", "TIFF": ".tif", "WEBP": ".webp", "BMP": ".bmp",
    "GIF": ".gif", "JPEG2000": ".jp2", "PPM": ".ppm", "TGA": ".tga", "DIB": ".bmp", "ICO": ".ico",
}

#: File-name extensions treated as photos when scanning folders and zips.
IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".tif", ".tiff", ".webp", ".bmp",
                              ".gif", ".jp2", ".ppm", ".pgm", ".pbm", ".tga"})


def extension_for(fmt: str) -> str:
    """Storage extension for a PIL format name (``.jpg`` for JPEG, ``.bin`` when unknown)."""
    return FORMAT_EXTENSIONS.get((fmt or "").upper(), "." + fmt.lower() if fmt and fmt.isalnum() else ".bin")


# --------------------------------------------------------------------------- annotation crops

#: JPEG DCT scale reductions that draft mode can decode at (1 = none).
DRAFT_SCALES = (1, 2, 4, 8)


@dataclass(frozen=True, eq=False)
class CropDecode:
    """An annotation's crop as decoded by :func:`load_crop`.

    ``rgb`` is the H x W x 3 uint8 crop (upright); ``scale`` the JPEG draft reduction the frame was decoded at
    (1: full resolution; 2, 4 or 8: DCT-scaled); ``frame_size`` the (W, H) of the full-resolution frame after
    EXIF orientation (as a person sees it); ``rect`` the (left, top, right, bottom) of the crop in the *decoded*
    frame (multiply by ``scale`` for full-resolution pixels, to within ``scale`` pixels).
    """

    rgb: np.ndarray
    scale: int
    frame_size: tuple[int, int]
    rect: tuple[int, int, int, int] = (0, 0, 0, 0)


def decode_key(scale: int) -> str:
    """The text a feature fingerprint records for a crop decoded at JPEG draft ``scale``: ``""`` for a full
    decode (1), ``"-draft2"``, ``"-draft4"``, ``"-draft8"`` otherwise."""
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or int(scale) not in DRAFT_SCALES:
        raise ValueError(f"JPEG draft scale must be one of {', '.join(map(str, DRAFT_SCALES))}, got {scale!r}")
    return "" if int(scale) == 1 else f"-draft{int(scale)}"


def _read_source(source: bytes | bytearray | memoryview | str | os.PathLike[str]) -> tuple[bytes, str]:
    """(bytes, file name for messages) of a photo given as bytes or a path (same rules as :func:`load_rgb`)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source), ""
    path = os.fspath(source)
    with open(path, "rb") as fh:
        return fh.read(), os.path.basename(path)


def _can_draft(img: Image.Image) -> bool:
    """Whether ``img`` (opened, not loaded) can be DCT-scaled while decoding (what :func:`load_rgb` drafts)."""
    return img.format == "JPEG" and img.mode in ("RGB", "L", "CMYK", "YCbCr")


def _header_orientation(img: Image.Image) -> int:
    try:
        return _orientation(img.getexif())
    except Exception:  # malformed EXIF must not block an otherwise good photo
        return 1


def _oriented_size(size: tuple[int, int], orientation: int) -> tuple[int, int]:
    """(W, H) after applying EXIF ``orientation`` (5-8 swap the sides)."""
    return (size[1], size[0]) if orientation in (5, 6, 7, 8) else (size[0], size[1])


def crop_draft_scale(frame_size: tuple[int, int], box: Box, min_side: int | None, *,
                     margin: float = CROP_MARGIN) -> int:
    """The largest JPEG draft reduction (1, 2, 4 or 8) at which ``box``'s crop of a ``frame_size`` (W, H) frame
    (the upright, full-resolution frame) still has its longer side at least ``min_side`` pixels; 1 when
    ``min_side`` is None or the crop is already smaller. The crop is measured exactly as it will be cut from
    the DCT-scaled frame (each side ``ceil(side / scale)``), so the promise holds to the pixel."""
    if min_side is None:
        return 1
    if min_side < 1:
        raise ValueError(f"min_side must be >= 1, got {min_side}")
    w, h = int(frame_size[0]), int(frame_size[1])
    for s in sorted(DRAFT_SCALES, reverse=True):
        if s == 1:
            return 1
        if w < s or h < s:
            continue
        sw, sh = -(-w // s), -(-h // s)
        left, top, right, bottom = crop_rect(box, sw, sh, margin=margin)
        if max(right - left, bottom - top) >= min_side:
            return s
    return 1


def _decode_frame(data: bytes, *, name: str, max_pixels: int, scale: int,
                  opened: Image.Image | None = None) -> tuple[Image.Image, int, tuple[int, int]]:
    """(upright RGB frame, draft scale actually used, full-resolution upright (W, H)), decoded as :func:`load_rgb`
    does: draft (when ``scale`` > 1 and the file is a JPEG) before loading, EXIF orientation after converting.
    ``opened``: the file already opened (header only) by :func:`_open_checked`, used instead of opening again."""
    img = opened if opened is not None else _open_checked(data, name=name, max_pixels=max_pixels)
    full = img.size
    used = 1
    if scale > 1 and _can_draft(img):
        res = img.draft("RGB" if img.mode != "L" else "L", (max(1, full[0] // scale), max(1, full[1] // scale)))
        if res is not None:
            used = max(1, round(full[0] / res[1][2]))
    _load_pixels(img, name=name)
    orientation = _header_orientation(img)
    try:
        rgb = to_rgb8(img)
    except ImageDecodeError as exc:
        raise ImageDecodeError(f"{_label(name)}{exc}") from None
    except (OSError, ValueError) as exc:
        raise ImageDecodeError(f"{_label(name)}the colours could not be converted ({exc})") from None
    if orientation != 1:
        rgb = rgb.transpose(_ORIENTATION_TRANSPOSE[orientation])
    return rgb, used, _oriented_size(full, orientation)


def load_crops(source: bytes | str | os.PathLike[str], boxes: list[Box] | tuple[Box, ...], *,
               margin: float = CROP_MARGIN, min_side: int | None = None,
               max_pixels: int = MAX_PIXELS) -> list[CropDecode]:
    """:func:`load_crop` for several boxes of one frame, decoding the frame once per distinct draft scale
    (usually once): each result is exactly what :func:`load_crop` gives for that box alone."""
    boxes = list(boxes)
    if not boxes:
        return []
    if margin < 0:
        raise ValueError(f"crop margin must be >= 0, got {margin}")
    if min_side is not None and min_side < 1:
        raise ValueError(f"min_side must be >= 1, got {min_side}")
    data, name = _read_source(source)
    head: Image.Image | None = _open_checked(data, name=name, max_pixels=max_pixels)  # header only
    wanted = [1] * len(boxes)
    if min_side is not None and _can_draft(head):
        frame = _oriented_size(head.size, _header_orientation(head))
        wanted = [crop_draft_scale(frame, b, min_side, margin=margin) for b in boxes]
    out: list[CropDecode | None] = [None] * len(boxes)
    for scale in sorted(set(wanted)):  # the first decode reuses the opened header, a second one reopens
        rgb_img, used, frame_size = _decode_frame(data, name=name, max_pixels=max_pixels, scale=scale, opened=head)
        head = None
        rgb = np.asarray(rgb_img, dtype=np.uint8)
        for i, b in enumerate(boxes):
            if wanted[i] != scale:
                continue
            rect = crop_rect(b, rgb.shape[1], rgb.shape[0], margin=margin)
            crop = rgb[rect[1]:rect[3], rect[0]:rect[2]]
            out[i] = CropDecode(rgb=np.array(crop, dtype=np.uint8, copy=True), scale=used,
                                frame_size=frame_size, rect=rect)
    return [c for c in out if c is not None]


def load_crop(source: bytes | str | os.PathLike[str], box: Box, *, margin: float = CROP_MARGIN,
              min_side: int | None = None, max_pixels: int = MAX_PIXELS) -> CropDecode:
    """Decode one annotation's crop (``box`` grown by ``margin``, see :func:`core.annotations.crop_rect`) from
    photo bytes or a path, as fast as the crop allows.

    With ``min_side`` (for a model input of S pixels, :func:`draft_size` (S)) a JPEG is decoded in draft mode
    at the largest DCT reduction (1/2, 1/4, 1/8) that keeps the crop's *longer* side at least ``min_side``
    pixels (:func:`crop_draft_scale`), and the crop is cut from that smaller frame; without it (or for other
    formats) the frame is decoded in full (``scale`` 1) and the crop equals
    ``crop_array(load_rgb(source), box, margin=margin)`` exactly. The crop is always computed in the upright
    (EXIF-oriented) frame: draft is applied to the stored pixels, then the orientation, then the crop.

    Raises :class:`ImageDecodeError` as :func:`load_rgb` does: an empty file, a non-image, a header announcing
    more than ``max_pixels`` pixels (before decoding) or a damaged / truncated file. Record
    :func:`decode_key` (``result.scale``) in the feature fingerprint: draft crops are not pixel-identical to
    full-resolution ones.
    """
    return load_crops(source, [box], margin=margin, min_side=min_side, max_pixels=max_pixels)[0]
