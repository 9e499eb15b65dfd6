"""A folder of photos: :class:`FolderTree` (links leaving the folder are not followed) and the folder-per-identity
layout (:func:`folder_entries`): photos inside sub-folders belong to the individual named by their *first-level*
sub-folder; photos at the top level stay unassigned. The camera-trap ``Station/...`` layout
(:func:`station_entries`) reads the first-level folder as the camera station instead. Which of the two a
folder's names mean, or neither, is the person's choice (:data:`FOLDER_MEANINGS`, :func:`give_folders_meaning`);
:func:`folder_counts` says what there is to choose about."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

from core.io.images import IMAGE_EXTENSIONS
from core.readers.base import Entry, ReadError, Tree, hidden, oversized, read_limited, tree_reader, unsafe_reason
from core.readers.report import IngestItemResult


class FolderTree(Tree):
    """Files under a folder; links that resolve outside the folder are not followed."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.real_root = self.root.resolve()
        self.label = str(root)
        self.problems = []
        self._files: list[str] | None = None

    def _inside(self, p: Path) -> bool:
        try:
            real = p.resolve()
        except OSError:
            return False
        return real == self.real_root or self.real_root in real.parents

    def files(self) -> list[str]:
        if self._files is None:
            out: list[str] = []
            for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
                d = Path(dirpath)
                kept = []
                for dn in sorted(dirnames):
                    rel = (d / dn).relative_to(self.root).as_posix()
                    if hidden(rel):
                        continue
                    if (d / dn).is_symlink():
                        self.problems.append(IngestItemResult(rel, "skipped", "a link to another folder; links are not followed"))
                        continue
                    kept.append(dn)
                dirnames[:] = kept
                for fn in sorted(filenames):
                    p = d / fn
                    rel = p.relative_to(self.root).as_posix()
                    if hidden(rel):
                        continue
                    if p.is_symlink() and not self._inside(p):
                        self.problems.append(IngestItemResult(rel, "error", "refused: a link pointing outside the folder; links leaving the folder are not followed"))
                        continue
                    out.append(rel)
            self._files = sorted(out)
        return self._files

    def has(self, rel: str) -> bool:
        if unsafe_reason(rel):
            return False
        p = self.root / rel
        return p.is_file() and self._inside(p)

    def read(self, rel: str) -> bytes:
        if unsafe_reason(rel):
            raise ReadError("refused: the path leads outside the folder")
        p = self.root / rel
        if not self._inside(p):
            raise ReadError("refused: a link pointing outside the folder; links leaving the folder are not followed")
        try:
            with open(p, "rb") as fh:
                return read_limited(fh, name=rel)
        except FileNotFoundError:
            raise ReadError("the file disappeared before it could be read") from None
        except OSError as exc:
            raise ReadError(f"could not be read ({exc.strerror or exc})") from None


def folder_entries(tree: Tree, *, display_prefix: str = "") -> list[Entry]:
    """Photos of a folder tree: sub-folder (first level) = identity; top-level photos unassigned."""
    entries: list[Entry] = []
    for rel in tree.files():
        name = display_prefix + rel
        ext = PurePosixPath(rel).suffix.lower()
        if ext not in IMAGE_EXTENSIONS:
            what = f"'{ext}'" if ext else "no extension"
            entries.append(Entry(name, error=f"not a photo file type ({what}); skipped", error_status="skipped"))
            continue
        parts = rel.split("/")
        identity = parts[0].strip() if len(parts) > 1 else None
        too_large = oversized(tree.size(rel))
        if too_large:
            entries.append(Entry(name, error=too_large, identity=identity or None))
            continue
        entries.append(Entry(name, read=tree_reader(tree, rel), identity=identity or None))
    return entries


def station_entries(entries: Sequence[Entry]) -> list[Entry]:
    """The ``Station/...`` layout of camera-trap tools (camtrapR: ``<root>/<Station>/<...>/photo.jpg``), from the
    entries :func:`folder_entries` made: the first-level folder names the camera station (a location, given to the
    import as ``Entry.deployment``; the store picks the deployment of that station active when the photo was
    taken), not an individual. Photos at the top level belong to no station and say so."""
    out: list[Entry] = []
    for e in entries:
        if e.read is None:  # a skipped or refused file stays as it was
            out.append(e)
        elif e.identity:
            out.append(replace(e, deployment=e.identity, identity=None))
        else:
            note = "not inside a station folder: imported without a deployment"
            out.append(replace(e, warning=f"{e.warning}; {note}" if e.warning else note))
    return out


#: What the first-level sub-folders of a folder or zip of photos mean: camera stations (``Station/...``), one
#: individual each, or nothing (photos come in unassigned, without a deployment).
FOLDER_MEANINGS = ("stations", "individuals", "none")


def give_folders_meaning(entries: Sequence[Entry], meaning: str) -> list[Entry]:
    """The entries :func:`folder_entries` made, with their first-level folder read as ``meaning`` (one of
    :data:`FOLDER_MEANINGS`): ``individuals`` keeps the folder as the identity, ``stations`` makes it the
    deployment (:func:`station_entries`), ``none`` drops it, so no folder name ever names an animal unasked."""
    if meaning == "individuals":
        return list(entries)
    if meaning == "stations":
        return station_entries(entries)
    if meaning == "none":
        return [replace(e, identity=None) if e.read is not None and e.identity else e for e in entries]
    raise ValueError(f"unknown folder meaning {meaning!r}; choose one of {', '.join(FOLDER_MEANINGS)}")


@dataclass(frozen=True)
class FolderCounts:
    """The photos of a folder layout by first-level folder (sorted by name), and those outside any folder."""

    folders: dict[str, int]
    loose: int = 0

    @property
    def photos(self) -> int:
        return sum(self.folders.values()) + self.loose


def folder_counts(entries: Sequence[Entry]) -> FolderCounts:
    """How many photos each first-level folder of :func:`folder_entries`' entries holds (skipped files left
    out), and how many photos lie outside every folder."""
    folders: dict[str, int] = {}
    loose = 0
    for e in entries:
        if e.read is None:
            continue
        if e.identity:
            folders[e.identity] = folders.get(e.identity, 0) + 1
        else:
            loose += 1
    return FolderCounts(dict(sorted(folders.items())), loose)
