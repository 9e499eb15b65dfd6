"""Everything an import does to one file before the database: read, hash, decode, thumbnail, alpha mask
(:func:`prepare_entry`), and the words that describe the photo in the report (:func:`describe`)."""

from __future__ import annotations

import hashlib
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

from core.images import MAX_PIXELS, DecodedImage, ImageDecodeError, decode_image, make_thumbnail
from core.readers.base import Entry, ReadError
from core.readers.report import IngestItemResult


@dataclass
class Prepared:
    """A file read, hashed and decoded, waiting for its database transaction."""

    entry: Entry
    data: bytes | None = None
    digest: str | None = None
    decoded: DecodedImage | None = None
    thumb: bytes | None = None
    mask_png: bytes | None = None
    quality: Any = None
    result: IngestItemResult | None = None  # set when the file already failed


def short_error(exc: BaseException) -> str:
    """The first line of an exception's message (its type when it has none), at most 300 characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def alpha_threshold() -> int:
    from core.masking import ALPHA_THRESHOLD  # core.masking loads OpenCV: only for photos with transparency

    return int(ALPHA_THRESHOLD)


def alpha_mask(decoded: DecodedImage):
    """Mask PNG bytes and quality of a transparent image: foreground = alpha > threshold."""
    from core.masking import encode_mask_png, mask_quality  # OpenCV: only for photos with transparency

    mask = decoded.alpha > alpha_threshold()
    return encode_mask_png(mask), mask_quality(mask)


def prepare_entry(e: Entry, *, known_hashes: Container[str] = (), max_pixels: int = MAX_PIXELS) -> Prepared:
    """Read and hash one entry's file, then decode it unless its bytes are in ``known_hashes`` (already
    catalogued: a re-run costs a hash per file). A failure is kept in ``result`` for the report."""
    prep = Prepared(e)
    if e.error is not None:
        prep.result = IngestItemResult(e.name, e.error_status, e.error)
        return prep
    assert e.read is not None
    try:
        data = e.read()
    except ReadError as exc:
        prep.result = IngestItemResult(e.name, "error", str(exc))
        return prep
    if not data:
        prep.result = IngestItemResult(e.name, "error", "the file is empty (0 bytes)")
        return prep
    prep.data, prep.digest = data, hashlib.sha256(data).hexdigest()
    if prep.digest not in known_hashes:
        decode_prepared(prep, max_pixels=max_pixels)
    return prep


def decode_prepared(prep: Prepared, *, max_pixels: int = MAX_PIXELS) -> None:
    """Decode the file's bytes, make its thumbnail and, for a transparent photo, its alpha mask."""
    e = prep.entry
    try:
        prep.decoded = decode_image(prep.data, max_pixels=max_pixels)
        prep.thumb = make_thumbnail(prep.decoded.image)
        if prep.decoded.has_transparency:
            prep.mask_png, prep.quality = alpha_mask(prep.decoded)
    except ImageDecodeError as exc:
        prep.result = IngestItemResult(e.name, "error", str(exc))
    except (OSError, ValueError, MemoryError) as exc:
        prep.result = IngestItemResult(e.name, "error", f"the picture could not be processed ({short_error(exc)})")


def describe(decoded: DecodedImage, e: Entry, *, mask: bool) -> str:
    """``1200x800 JPEG, -> Amber, left flank, sighting S1, alpha mask kept``: what the import saw in a photo."""
    bits = [f"{decoded.width}x{decoded.height} {decoded.format}"]
    if decoded.mode != "RGB":
        bits.append(f"mode {decoded.mode}")
    if e.identity:
        bits.append(f"-> {e.identity}")
    if e.flank:
        bits.append(f"{e.flank} flank")
    if e.sighting:
        bits.append(f"sighting {e.sighting['key']}")
    if mask:
        bits.append("alpha mask kept")
    if decoded.orientation != 1:
        bits.append("rotated upright")
    return ", ".join(bits)
