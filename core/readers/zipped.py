"""A zip archive of photos read in place (:class:`ZipTree`): unsafe members (``..``, absolute paths, links,
encrypted files, duplicate names) become problems; a single wrapper folder enclosing everything is ignored
(what "compress folder" makes)."""

from __future__ import annotations

import stat
import zipfile
from pathlib import Path
from typing import BinaryIO

from core.readers.base import MAX_FILE_BYTES, IngestError, ReadError, Tree, hidden, read_limited, unsafe_reason
from core.readers.report import IngestItemResult


class ZipTree(Tree):
    """Members of a zip archive; unsafe members (``..``, absolute, links, encrypted) become problems."""

    def __init__(self, path: Path, *, label: str | None = None) -> None:
        self.label = label or Path(path).name
        self.problems = []
        try:
            self.zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise IngestError(f"{self.label}: not a readable zip archive ({exc})") from None
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in self.zf.infolist():
            name = info.filename.replace("\\", "/")
            if info.is_dir() or name.endswith("/"):
                continue
            reason = unsafe_reason(name)
            if reason:
                self.problems.append(IngestItemResult(
                    name, "error", f"refused: unsafe path inside the zip ({reason}: files may only be unpacked inside the archive)"))
                continue
            if hidden(name):
                continue
            if stat.S_ISLNK(info.external_attr >> 16):
                self.problems.append(IngestItemResult(name, "error", "refused: a symbolic link inside the zip"))
                continue
            if info.flag_bits & 0x1:
                self.problems.append(IngestItemResult(name, "error", "refused: the file is encrypted (password-protected zip)"))
                continue
            if name in self._members:
                self.problems.append(IngestItemResult(name, "error", "the zip holds two files with this name; only the first is used"))
                continue
            self._members[name] = info
        # a single wrapper folder around everything ("photos/...") is not an identity
        self.prefix = ""
        tops = {n.split("/", 1)[0] for n in self._members}
        if len(tops) == 1 and all("/" in n for n in self._members):
            self.prefix = tops.pop() + "/"

    def files(self) -> list[str]:
        return sorted(n[len(self.prefix):] for n in self._members)

    def has(self, rel: str) -> bool:
        return not unsafe_reason(rel) and (self.prefix + rel) in self._members

    def size(self, rel: str) -> int | None:
        info = self._members.get(self.prefix + rel)
        return info.file_size if info is not None else None

    def read(self, rel: str) -> bytes:
        info = self._members.get(self.prefix + rel)
        if info is None:
            raise ReadError("not in the zip")
        if info.file_size > MAX_FILE_BYTES:
            raise ReadError(f"refused: the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
        try:
            with self.zf.open(info) as fh:
                return read_limited(fh, name=rel)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
            raise ReadError(f"could not be unpacked from the zip ({exc})") from None

    def open(self, rel: str) -> BinaryIO:
        """The member as a stream, decompressed as it is read (never whole in memory)."""
        info = self._members.get(self.prefix + rel)
        if info is None:
            raise ReadError("not in the zip")
        if info.file_size > MAX_FILE_BYTES:
            raise ReadError(f"refused: the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
        try:
            return self.zf.open(info)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
            raise ReadError(f"could not be unpacked from the zip ({exc})") from None

    def close(self) -> None:
        self.zf.close()
