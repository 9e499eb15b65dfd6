"""What every reader shares: the errors, one file to import (:class:`Entry`), the hardened read of a file,
the checks on client-supplied paths, and :class:`Tree`, a read-only view of the files under a root (a folder
or a zip) by safe relative POSIX path.

Client paths are never trusted: paths with ``..`` or absolute paths are refused (:func:`unsafe_reason`), and
no file larger than :data:`MAX_FILE_BYTES` is read (protecting memory against huge files and zip bombs).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, BinaryIO

from core.readers.report import IngestItemResult

#: Largest single file accepted (bytes); protects memory against huge files and zip bombs.
MAX_FILE_BYTES = 256 * 1024 * 1024
#: Files next to photos that are quietly ignored when scanning a folder or zip.
QUIET_SKIP = {"thumbs.db", "desktop.ini", ".ds_store"}


class IngestError(ValueError):
    """The import as a whole cannot start (missing path, wrong format); the message says why."""


class ManifestError(IngestError):
    """A manifest that cannot be used at all (e.g. missing required columns)."""


class ReadError(Exception):
    """One file could not be read (the message says why, for the report)."""


@dataclass
class Entry:
    """One file to import, with the facts the source gave about it."""

    name: str
    read: Callable[[], bytes] | None = None
    # the file as a stream, when its source can give one (a zip member, a package's file): read in chunks, so a
    # large file is never whole in memory (core.readers.prepare spools it to disk)
    open: Callable[[], BinaryIO] | None = None
    identity: str | None = None
    flank: str | None = None  # left, right, front or other (the catalogue's Flank values); None: not stated
    sighting: dict[str, Any] | None = None  # key, date, place, lat, lon, camera, observer
    species: str | None = None
    # camera stations: the deployment's id (Camtrap DP deploymentID, a manifest ``deployment`` column,
    # or the Station/... folder layout), when the photo was taken as given (ISO 8601, with or without offset),
    # and a Camtrap DP media row's mediaID and its other fields
    deployment: str | None = None
    taken_at: str | None = None
    media_key: str | None = None
    media_details: dict[str, Any] | None = None
    warning: str | None = None  # imported, but the curator should know (e.g. a short manifest row)
    error: str | None = None
    error_status: str = "error"


def read_limited(fh, *, name: str) -> bytes:
    data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ReadError(f"refused: the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    return data


def unsafe_reason(rel: str) -> str | None:
    """Why a client-supplied relative path is refused (absolute, drive letter, '..'), else None."""
    p = rel.replace("\\", "/")
    if p.startswith("/") or (len(p) >= 2 and p[1] == ":"):
        return "absolute path"
    if any(part == ".." for part in p.split("/")):
        return "'..' leads outside"
    return None


def oversized(size: int | None) -> str | None:
    """Why a file of ``size`` bytes (as its listing gives it) is refused before anything of it is unpacked, or
    None: a member too large for a photo is never spooled to the temporary folder only to be refused there."""
    if size is None or size <= MAX_FILE_BYTES:
        return None
    return (f"refused before unpacking: the zip lists it as {_megabytes(size)}, more than the "
            f"{_megabytes(MAX_FILE_BYTES)} a photo may be")


def _megabytes(size: int) -> str:
    mb = size / 2 ** 20
    return f"{mb:,.0f} MB" if mb >= 10 else f"{mb:.1f} MB"


def hidden(rel: str) -> bool:
    parts = rel.split("/")
    return any(p.startswith(".") or p == "__MACOSX" for p in parts) or parts[-1].lower() in QUIET_SKIP


class Tree:
    """Read-only view of files under a root (a folder or a zip), by safe relative POSIX path."""

    label: str

    def files(self) -> list[str]:
        raise NotImplementedError

    def has(self, rel: str) -> bool:
        raise NotImplementedError

    def read(self, rel: str) -> bytes:
        raise NotImplementedError

    def open(self, rel: str) -> BinaryIO:
        """The file as a binary stream (ReadError as :meth:`read`); trees that can stream override this."""
        return io.BytesIO(self.read(rel))

    def size(self, rel: str) -> int | None:
        """The file's size as the tree lists it without reading it (a zip member's header), or None when the tree
        cannot tell before reading."""
        return None

    problems: list[IngestItemResult]

    def find(self, rel: str, *, prefixes: Sequence[str] = ("",)) -> str | None:
        """Resolve a path named by a CSV: under each prefix, then by unique file name anywhere."""
        rel = rel.replace("\\", "/")
        while rel.startswith("./"):
            rel = rel[2:]
        for prefix in prefixes:
            cand = prefix + rel
            if self.has(cand):
                return cand
        base = PurePosixPath(rel).name
        hits = self._by_basename().get(base.lower(), [])
        return hits[0] if len(hits) == 1 else None

    def _by_basename(self) -> dict[str, list[str]]:
        if not hasattr(self, "_basename_index"):
            index: dict[str, list[str]] = {}
            for rel in self.files():
                index.setdefault(PurePosixPath(rel).name.lower(), []).append(rel)
            self._basename_index = index
        return self._basename_index

    def close(self) -> None:
        pass


def tree_reader(tree: Tree, rel: str) -> Callable[[], bytes]:
    return lambda: tree.read(rel)


def tree_opener(tree: Tree, rel: str) -> Callable[[], BinaryIO]:
    return lambda: tree.open(rel)


def file_reader(path: Path) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            with open(path, "rb") as fh:
                return read_limited(fh, name=path.name)
        except OSError as exc:
            raise ReadError(f"could not be read ({exc.strerror or exc})") from None

    return read
