"""Content-addressed file store under the data directory.

Bytes are stored at ``<kind>/<hh>/<sha256><ext>``; the same bytes stored twice
land on the same path and are written once. Writes go to a temporary file that
is renamed into place, so a crash never leaves a half-written blob.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_disk_full(exc: BaseException) -> bool:
    """True for the error of writing to a full disk (or a full quota)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class BlobStore:
    """Stores files by content hash; paths handed out are relative to ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def relative_path(self, digest: str, *, kind: str, ext: str) -> str:
        ext = ext if ext.startswith(".") or not ext else "." + ext
        return f"{kind}/{digest[:2]}/{digest}{ext.lower()}"

    def put(self, data: bytes | Path, *, kind: str = "images", ext: str = "", digest: str | None = None) -> str:
        """Store ``data`` (if not already there) and return its relative path. ``data`` may be the path of a file
        too large to hold in memory (then ``digest`` is its sha256): it is copied in chunks."""
        is_file = isinstance(data, Path)
        if is_file and digest is None:
            raise ValueError("storing a file by its path needs its sha256 digest")
        digest = digest or sha256_bytes(data)
        rel = self.relative_path(digest, kind=kind, ext=ext)
        path = self.root / rel
        size = data.stat().st_size if is_file else len(data)
        if path.exists() and path.stat().st_size == size:
            return rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as fh:
                if is_file:
                    with open(data, "rb") as src:
                        shutil.copyfileobj(src, fh, 1024 * 1024)
                else:
                    fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return rel

    def path(self, rel: str) -> Path:
        """Absolute path of a stored relative path (refuses paths escaping the root)."""
        p = (self.root / rel).resolve()
        if self.root.resolve() not in p.parents:
            raise ValueError(f"path {rel!r} escapes the data directory")
        return p

    def existing(self, rel: str | None) -> str | None:
        """Absolute path (as text) of a stored file, or None when ``rel`` is empty, escapes the root
        or the file is gone. Only stored relative paths are accepted, never client-given ones."""
        if not rel:
            return None
        try:
            path = self.path(rel)
        except ValueError:
            return None
        return str(path) if path.exists() else None

    def read(self, rel: str) -> bytes:
        return self.path(rel).read_bytes()

    def delete(self, rel: str) -> None:
        self.path(rel).unlink(missing_ok=True)
