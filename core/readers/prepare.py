"""Everything an import does to one file before the database: read, hash, decode, thumbnail, alpha mask
(:func:`prepare_entry`), and the words that describe the photo in the report (:func:`describe`)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Container, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.io.images import MAX_PIXELS, DecodedImage, ImageDecodeError, decode_image, make_thumbnail
from core.readers.base import MAX_FILE_BYTES, Entry, ReadError
from core.readers.report import IngestItemResult


@dataclass
class Prepared:
    """A file read, hashed and decoded, waiting for its database transaction."""

    entry: Entry
    data: bytes | None = None  # the file's bytes; None when it was spooled to ``path``
    path: Path | None = None  # a large streamed file, spooled to disk (removed by :meth:`discard`)
    size: int = 0
    digest: str | None = None
    decoded: DecodedImage | None = None
    thumb: bytes | None = None
    mask_png: bytes | None = None
    quality: Any = None
    result: IngestItemResult | None = None  # set when the file already failed

    @property
    def source(self) -> bytes | Path | None:
        """The file: its bytes, or the path of its spooled copy."""
        return self.data if self.data is not None else self.path

    def discard(self) -> None:
        """Remove the spooled copy, if any (the stored blob is a copy of its own)."""
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


#: A streamed file is read in chunks of this size, and kept in memory up to SPOOL_BYTES, on disk beyond.
CHUNK_BYTES = 1024 * 1024
SPOOL_BYTES = 4 * 1024 * 1024
#: What an import spools in the temporary folder is named ``rosette-import-<pid>-...``: a later import can tell
#: what a killed one (whose process is gone) left there.
SPOOL_PREFIX = "rosette-import-"
_SPOOL_OWNER = re.compile(re.escape(SPOOL_PREFIX) + r"(\d+)-")


def _spool_prefix() -> str:
    return f"{SPOOL_PREFIX}{os.getpid()}-"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process (EPERM): alive
        return True
    return True


def remove_dead_spools(folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove what imports whose process is gone (killed, or the machine lost power) left in ``folder`` (the
    temporary folder): a spool folder or file can hold a whole unpacked photo or video. Another running import's
    are left alone. Returns what was removed."""
    root = Path(folder if folder is not None else tempfile.gettempdir())
    removed: list[Path] = []
    try:
        found = list(root.glob(SPOOL_PREFIX + "*"))
    except OSError:
        return removed
    for path in found:
        owner = _SPOOL_OWNER.match(path.name)
        if owner is None or _process_alive(int(owner.group(1))):
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:  # another user's, or gone meanwhile: not this import's to clean
            continue
        removed.append(path)
    return removed


@contextmanager
def spool_folder() -> Iterator[str]:
    """A temporary folder for one import's large streamed files, named after this process and removed at the
    end; first, what killed imports left behind is removed."""
    remove_dead_spools()
    with tempfile.TemporaryDirectory(prefix=_spool_prefix()) as folder:
        yield folder


def _stream(prep: Prepared, *, spool_dir: str | os.PathLike[str] | None) -> None:
    """Read ``prep.entry.open()`` in chunks, hashing as it goes: a small file ends in ``prep.data``, a larger one
    in a file under ``spool_dir`` (``prep.path``), so no file is ever whole in memory. ReadError as a read."""
    digest = hashlib.sha256()
    chunks: list[bytes] = []
    held = size = 0
    spool = None
    try:
        with prep.entry.open() as fh:
            while chunk := fh.read(CHUNK_BYTES):
                size += len(chunk)
                if size > MAX_FILE_BYTES:
                    raise ReadError(f"refused: the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
                digest.update(chunk)
                if spool is None and held + len(chunk) <= SPOOL_BYTES:
                    chunks.append(chunk)
                    held += len(chunk)
                    continue
                if spool is None:
                    fd, name = tempfile.mkstemp(prefix=_spool_prefix(), dir=spool_dir)
                    spool, prep.path = os.fdopen(fd, "wb"), Path(name)
                    for kept in chunks:
                        spool.write(kept)
                    chunks = []
                spool.write(chunk)
    except (OSError, EOFError, RuntimeError, ValueError) as exc:  # a damaged zip member, a vanished file
        if spool is not None:
            spool.close()
        prep.discard()
        raise ReadError(f"could not be read ({short_error(exc)})") from None
    except BaseException:
        if spool is not None:
            spool.close()
        prep.discard()
        raise
    if spool is not None:
        spool.close()
    else:
        prep.data = b"".join(chunks)
    prep.size, prep.digest = size, digest.hexdigest()


def short_error(exc: BaseException) -> str:
    """The first line of an exception's message (its type when it has none), at most 300 characters."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def alpha_threshold() -> int:
    from core.inspect.masking import (
        ALPHA_THRESHOLD,
    )  # core.inspect.masking loads OpenCV: only for photos with transparency

    return int(ALPHA_THRESHOLD)


def alpha_mask(decoded: DecodedImage):
    """Mask PNG bytes and quality of a transparent image: foreground = alpha > threshold."""
    from core.inspect.masking import encode_mask_png, mask_quality  # OpenCV: only for photos with transparency

    mask = decoded.alpha > alpha_threshold()
    return encode_mask_png(mask), mask_quality(mask)


def prepare_entry(e: Entry, *, known_hashes: Container[str] = (), max_pixels: int = MAX_PIXELS,
                  spool_dir: str | os.PathLike[str] | None = None) -> Prepared:
    """Read and hash one entry's file, then decode it unless its bytes are in ``known_hashes`` (already
    catalogued: a re-run costs a hash per file). A failure is kept in ``result`` for the report. An entry that
    can be streamed (``e.open``) is read in chunks and, when large, spooled to a file under ``spool_dir``: the
    caller calls :meth:`Prepared.discard` when done with it."""
    prep = Prepared(e)
    if e.error is not None:
        prep.result = IngestItemResult(e.name, e.error_status, e.error)
        return prep
    assert e.read is not None or e.open is not None
    try:
        if e.open is not None:
            _stream(prep, spool_dir=spool_dir)
        else:
            prep.data = e.read()
            prep.size = len(prep.data)
    except ReadError as exc:
        prep.result = IngestItemResult(e.name, "error", str(exc))
        return prep
    if not prep.size:
        prep.result = IngestItemResult(e.name, "error", "the file is empty (0 bytes)")
        return prep
    if prep.digest is None:
        prep.digest = hashlib.sha256(prep.data).hexdigest()
    if prep.digest not in known_hashes:
        decode_prepared(prep, max_pixels=max_pixels)
    return prep


def decode_prepared(prep: Prepared, *, max_pixels: int = MAX_PIXELS) -> None:
    """Decode the file's bytes, make its thumbnail and, for a transparent photo, its alpha mask."""
    e = prep.entry
    try:
        prep.decoded = decode_image(prep.source, max_pixels=max_pixels)
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
