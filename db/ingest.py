"""Importing photos into the catalogue: files, folders, zips, CSV manifests, Kaggle layouts.

Formats (``detect_format`` picks one; ``--format`` overrides):

- ``file``: one photo.
- ``folder``: every photo under a folder. Photos inside sub-folders belong to the
  individual named by their *first-level* sub-folder (folder-per-identity
  layout); photos at the top level stay unassigned (flat layout).
- ``zip``: the same inside a zip archive. A single wrapper folder enclosing
  everything is ignored (what "compress folder" makes), so a zip of *one*
  individual's folder imports unassigned: zip several folders or add a manifest. A zip holding ``train.csv`` (Kaggle) or ``manifest.csv``
  is read as that layout.
- ``manifest``: a CSV ``filename,identity[,flank,sighting,date,lat,lon,camera,observer]``
  (extra columns ignored; ``file``/``image`` and ``individual``/``ground_truth``
  accepted as column aliases). Files are looked up next to the CSV, then in its
  ``images/`` folder, then by unique file name anywhere below it. Photos the
  manifest does not list are not imported.
- ``kaggle``: ``train.csv`` (``filename,ground_truth``) and optional ``test.csv``
  (``row_id,query_image,gallery_image`` or ``filename``); images next to the CSVs or in
  ``train/``, ``test/`` or ``images/``. RGBA PNGs keep their alpha as the mask.

Every file is its own unit of work (one transaction per file): a file that fails
leaves no row and no blob of its own behind, and never undoes another file.
Images are stored content-addressed by the sha256 of the original bytes, so
importing the same bytes again is recognised (``duplicate``), and new facts
from a manifest (identity, flank, sighting) fill in what the image lacked
(``updated``); facts that *contradict* the catalogue are reported, never applied.
Client paths are never trusted: zip members with ``..`` or absolute paths,
links leaving the folder and manifest rows pointing outside it are refused.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import stat
import time
import zipfile
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from core.images import IMAGE_EXTENSIONS, MAX_PIXELS, DecodedImage, ImageDecodeError, decode_image, extension_for, make_thumbnail
from db.audit import acting_as
from db.catalogue import CatalogueError, find_individual_by_name, get_or_create_individual, get_or_create_user
from db.models import DEFAULT_SPECIES_ID, EventKind, Flank, IdentityEvent, Image, Individual, Sighting, utcnow
from db.storage import sha256_bytes

FORMATS = ("file", "folder", "zip", "manifest", "kaggle")
#: Result statuses, in the order reports list their counts.
STATUSES = ("imported", "updated", "duplicate", "would-import", "would-update", "skipped", "error")
#: Largest single file accepted (bytes); protects memory against huge files and zip bombs.
MAX_FILE_BYTES = 256 * 1024 * 1024
#: Manifest columns: canonical name -> accepted header spellings (case/space-insensitive).
MANIFEST_COLUMNS = {
    "filename": ("filename", "file_name", "file", "image", "path"),
    "identity": ("identity", "individual", "ground_truth", "individual_id"),
    "flank": ("flank", "side"),
    "sighting": ("sighting", "sighting_id", "encounter"),
    "date": ("date", "datetime", "date_time", "time"),
    "lat": ("lat", "latitude"),
    "lon": ("lon", "lng", "long", "longitude"),
    "camera": ("camera", "camera_id", "station"),
    "observer": ("observer", "photographer"),
    "place": ("place", "location", "site", "locality"),
    "species": ("species", "taxon", "species_name"),
}
MANIFEST_REQUIRED = ("filename", "identity")
FLANK_WORDS = {
    "left": Flank.left, "l": Flank.left, "right": Flank.right, "r": Flank.right,
    "front": Flank.front, "f": Flank.front, "other": Flank.other, "o": Flank.other,
    "": None, "unknown": None, "?": None, "na": None, "n/a": None,
}
#: Files next to photos that are quietly ignored when scanning a folder or zip.
_QUIET_SKIP = {"thumbs.db", "desktop.ini", ".ds_store"}
_MANIFEST_NAME = "manifest.csv"
_KAGGLE_TRAIN = "train.csv"
_KAGGLE_TEST = "test.csv"

#: Files read and decoded ahead of the database work, in a helper thread.
PREFETCH = 4

Progress = Callable[[int, int], None]


class IngestError(ValueError):
    """The import as a whole cannot start (missing path, wrong format); the message says why."""


# --------------------------------------------------------------------------- report


@dataclass
class IngestItemResult:
    """What happened to one file (or one manifest row)."""

    name: str
    status: str  # one of STATUSES
    message: str = ""
    image_id: int | None = None
    same_as: str | None = None  # duplicates: the name the same bytes already have, when it differs

    @property
    def needs_attention(self) -> bool:
        """Errors, skipped files, updates and duplicates under another name (not plain re-imports)."""
        return self.status in ("error", "skipped", "updated", "would-update") or (
            self.status == "duplicate" and self.same_as is not None)


@dataclass
class IngestReport:
    """Per-file outcome of one import, with counts for the summary line."""

    items: list[IngestItemResult] = field(default_factory=list)
    source: str = ""
    format: str = ""
    dry_run: bool = False
    seconds: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        """Number of items per status (every status present, zeros included)."""
        out = {s: 0 for s in STATUSES}
        for it in self.items:
            out[it.status] = out.get(it.status, 0) + 1
        return out

    @property
    def errors(self) -> list[IngestItemResult]:
        return [it for it in self.items if it.status == "error"]

    @property
    def image_ids(self) -> list[int]:
        """Catalogue ids of every image this import touched (imported, updated or already there)."""
        return [it.image_id for it in self.items if it.image_id is not None]

    @property
    def ok(self) -> bool:
        """True unless every item failed (an empty import is ok)."""
        return not self.items or any(it.status != "error" for it in self.items)

    @property
    def exit_code(self) -> int:
        """CLI exit code: 0 if at least one file was fine or nothing failed, 1 if everything failed."""
        return 0 if self.ok else 1

    def rows(self, *, statuses: Sequence[str] | None = None, attention_only: bool = False) -> list[tuple[str, str, str]]:
        """``(name, status, message)`` rows for tables: all, some statuses, or those needing attention."""
        return [(it.name, it.status, it.message) for it in self.items
                if (statuses is None or it.status in statuses) and (not attention_only or it.needs_attention)]

    def summary(self) -> str:
        """One line such as ``1213 imported, 0 errors (1213 files, 14.2 s, 85 files/s)``."""
        c = self.counts
        parts = [f"{n} {s if s != 'error' else ('errors' if n != 1 else 'error')}" for s, n in c.items()
                 if n or s in ("imported", "error")]
        rate = f", {len(self.items) / self.seconds:.0f} files/s" if self.seconds > 0 and self.items else ""
        prefix = "dry run (nothing written): " if self.dry_run else ""
        return f"{prefix}{', '.join(parts)} ({len(self.items)} files, {self.seconds:.1f} s{rate})"


# --------------------------------------------------------------------------- sources


@dataclass
class _Entry:
    """One file to import, with the facts the source gave about it."""

    name: str
    read: Callable[[], bytes] | None = None
    identity: str | None = None
    flank: Flank | None = None
    sighting: dict[str, Any] | None = None  # key, date, place, lat, lon, camera, observer
    species: str | None = None
    warning: str | None = None  # imported, but the curator should know (e.g. a short manifest row)
    error: str | None = None
    error_status: str = "error"


class _ReadError(Exception):
    pass


def _read_limited(fh, *, name: str) -> bytes:
    data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise _ReadError(f"refused: the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
    return data


def _unsafe_reason(rel: str) -> str | None:
    """Why a client-supplied relative path is refused (absolute, drive letter, '..'), else None."""
    p = rel.replace("\\", "/")
    if p.startswith("/") or (len(p) >= 2 and p[1] == ":"):
        return "absolute path"
    if any(part == ".." for part in p.split("/")):
        return "'..' leads outside"
    return None


def _hidden(rel: str) -> bool:
    parts = rel.split("/")
    return any(p.startswith(".") or p == "__MACOSX" for p in parts) or parts[-1].lower() in _QUIET_SKIP


class _Tree:
    """Read-only view of files under a root (a folder or a zip), by safe relative POSIX path."""

    label: str

    def files(self) -> list[str]:
        raise NotImplementedError

    def has(self, rel: str) -> bool:
        raise NotImplementedError

    def read(self, rel: str) -> bytes:
        raise NotImplementedError

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


class _FolderTree(_Tree):
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
                    if _hidden(rel):
                        continue
                    if (d / dn).is_symlink():
                        self.problems.append(IngestItemResult(rel, "skipped", "a link to another folder; links are not followed"))
                        continue
                    kept.append(dn)
                dirnames[:] = kept
                for fn in sorted(filenames):
                    p = d / fn
                    rel = p.relative_to(self.root).as_posix()
                    if _hidden(rel):
                        continue
                    if p.is_symlink() and not self._inside(p):
                        self.problems.append(IngestItemResult(rel, "error", "refused: a link pointing outside the folder; links leaving the folder are not followed"))
                        continue
                    out.append(rel)
            self._files = sorted(out)
        return self._files

    def has(self, rel: str) -> bool:
        if _unsafe_reason(rel):
            return False
        p = self.root / rel
        return p.is_file() and self._inside(p)

    def read(self, rel: str) -> bytes:
        if _unsafe_reason(rel):
            raise _ReadError("refused: the path leads outside the folder")
        p = self.root / rel
        if not self._inside(p):
            raise _ReadError("refused: a link pointing outside the folder; links leaving the folder are not followed")
        try:
            with open(p, "rb") as fh:
                return _read_limited(fh, name=rel)
        except FileNotFoundError:
            raise _ReadError("the file disappeared before it could be read") from None
        except OSError as exc:
            raise _ReadError(f"could not be read ({exc.strerror or exc})") from None


class _ZipTree(_Tree):
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
            reason = _unsafe_reason(name)
            if reason:
                self.problems.append(IngestItemResult(
                    name, "error", f"refused: unsafe path inside the zip ({reason}: files may only be unpacked inside the archive)"))
                continue
            if _hidden(name):
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
        return not _unsafe_reason(rel) and (self.prefix + rel) in self._members

    def read(self, rel: str) -> bytes:
        info = self._members.get(self.prefix + rel)
        if info is None:
            raise _ReadError("not in the zip")
        if info.file_size > MAX_FILE_BYTES:
            raise _ReadError(f"refused: the file is larger than {MAX_FILE_BYTES // (1024 * 1024)} MB")
        try:
            with self.zf.open(info) as fh:
                return _read_limited(fh, name=rel)
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
            raise _ReadError(f"could not be unpacked from the zip ({exc})") from None

    def close(self) -> None:
        self.zf.close()


def _reader(tree: _Tree, rel: str) -> Callable[[], bytes]:
    return lambda: tree.read(rel)


def _file_reader(path: Path) -> Callable[[], bytes]:
    def read() -> bytes:
        try:
            with open(path, "rb") as fh:
                return _read_limited(fh, name=path.name)
        except OSError as exc:
            raise _ReadError(f"could not be read ({exc.strerror or exc})") from None

    return read


# --------------------------------------------------------------------------- CSV manifests


class ManifestError(IngestError):
    """A manifest that cannot be used at all (e.g. missing required columns)."""


@dataclass
class _ManifestRow:
    line: int
    values: dict[str, str]
    missing: tuple[str, ...] = ()  # header columns a short (ragged) row has no cell for


def _read_csv(data: bytes, *, label: str) -> tuple[list[str], list[_ManifestRow]]:
    """Header (lower-cased, stripped) and non-blank rows of a CSV (UTF-8 with or without BOM, else Latin-1)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    header: list[str] | None = None
    rows: list[_ManifestRow] = []
    try:
        for raw in reader:
            if not any(c.strip() for c in raw):
                continue
            if header is None:
                header = [h.strip().lower().replace(" ", "_") for h in raw]
                continue
            values = {header[i]: raw[i].strip() for i in range(min(len(header), len(raw)))}
            rows.append(_ManifestRow(line=reader.line_num, values=values, missing=tuple(header[len(raw):])))
    except csv.Error as exc:
        raise ManifestError(f"{label}: not a readable CSV file ({exc})") from None
    if header is None:
        raise ManifestError(f"{label}: the CSV file is empty (no header line)")
    return header, rows


def _map_columns(header: list[str], *, required: Sequence[str], label: str,
                 columns: dict[str, Sequence[str]] = MANIFEST_COLUMNS) -> dict[str, str]:
    """Canonical column -> header name present; ManifestError naming every missing required column."""
    found: dict[str, str] = {}
    for canon, aliases in columns.items():
        for alias in aliases:
            if alias in header:
                found[canon] = alias
                break
    missing = [c for c in required if c not in found]
    if missing:
        raise ManifestError(
            f"{label}: missing required column{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} "
            f"(found: {', '.join(repr(h) for h in header if h) or 'none'}); nothing was imported"
        )
    return found


def parse_flank(value: str | None) -> Flank | None:
    """'left'/'L', 'right'/'R', 'front'/'F', 'other'/'O' (any case) -> Flank; blank/'unknown' -> None.

    Raises ValueError for anything else.
    """
    key = (value or "").strip().lower()
    if key not in FLANK_WORDS:
        raise ValueError(f"unknown flank {value!r} (use left, right, front or other, or L / R)")
    return FLANK_WORDS[key]


def _parse_coord(value: str, *, what: str, limit: float) -> float | None:
    if not value:
        return None
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not a number") from None
    if not -limit <= x <= limit:
        raise ValueError(f"{what} {value!r} is outside -{limit:g}..{limit:g}")
    return x


def _row_facts(row: _ManifestRow, cols: dict[str, str]
               ) -> tuple[str | None, Flank | None, dict[str, Any] | None, str | None]:
    """Identity, flank, sighting facts and species of one manifest row (ValueError with a curator message)."""
    get = lambda c: row.values.get(cols[c], "").strip() if c in cols else ""  # noqa: E731
    identity = get("identity") or None
    if identity and len(identity) > 200:
        raise ValueError("the identity name is longer than 200 characters")
    flank = parse_flank(get("flank"))
    lat = _parse_coord(get("lat"), what="latitude", limit=90.0)
    lon = _parse_coord(get("lon"), what="longitude", limit=180.0)
    place = get("place") or None
    if place and len(place) > 200:
        raise ValueError("the place is longer than 200 characters")
    species = get("species") or None
    if species and (len(species) > 120 or any(ord(c) < 32 for c in species)):
        raise ValueError("the species is longer than 120 characters or holds control characters")
    facts = {"date": get("date") or None, "place": place, "lat": lat, "lon": lon, "camera": get("camera") or None,
             "observer": get("observer") or None}
    key = get("sighting")
    if not key and any(v is not None for v in facts.values()):
        # no sighting label: photos sharing date, place, camera and observer are one sighting
        key = " / ".join(str(v) for v in facts.values() if v is not None)
    sighting = {"key": key[:200], **facts} if key else None
    return identity, flank, sighting, species


def _manifest_entries(tree: _Tree, csv_rel: str, *, prefixes: Sequence[str] = ("", "images/"),
                      display_prefix: str = "") -> list[_Entry]:
    """Entries of a manifest CSV inside ``tree`` (raises ManifestError when unusable)."""
    label = display_prefix + csv_rel
    try:
        header, rows = _read_csv(tree.read(csv_rel), label=label)
    except _ReadError as exc:
        raise ManifestError(f"{label}: {exc}") from None
    cols = _map_columns(header, required=MANIFEST_REQUIRED, label=label)
    base_dir = str(PurePosixPath(csv_rel).parent)
    base = "" if base_dir in ("", ".") else base_dir + "/"
    entries: list[_Entry] = []
    for row in rows:
        fname = row.values.get(cols["filename"], "").strip()
        name = display_prefix + (fname or f"{csv_rel} line {row.line}")
        if not fname:
            entries.append(_Entry(name, error=f"line {row.line}: the filename is empty"))
            continue
        reason = _unsafe_reason(fname)
        if reason:
            entries.append(_Entry(name, error=f"line {row.line}: refused: {reason} of the manifest's folder"))
            continue
        try:
            identity, flank, sighting, species = _row_facts(row, cols)
        except ValueError as exc:
            entries.append(_Entry(name, error=f"line {row.line}: {exc}"))
            continue
        rel = tree.find(fname, prefixes=[base + p for p in prefixes])
        if rel is None:
            where = " or ".join(f"'{base + p}'" if base + p else "the manifest's folder" for p in prefixes)
            entries.append(_Entry(name, error=f"line {row.line}: listed in the manifest but not found (looked in {where})"))
            continue
        warning = (f"line {row.line} has only {len(row.values)} of the header's {len(row.values) + len(row.missing)} "
                   f"cells: no {', '.join(row.missing)} for this photo") if row.missing else None
        entries.append(_Entry(name, read=_reader(tree, rel), identity=identity, flank=flank, sighting=sighting,
                              species=species, warning=warning))
    return entries


def _kaggle_entries(tree: _Tree, train_rel: str, *, display_prefix: str = "") -> list[_Entry]:
    """Entries of a Kaggle layout: train.csv rows with identities, then test.csv images without."""
    label = display_prefix + train_rel
    try:
        header, rows = _read_csv(tree.read(train_rel), label=label)
    except _ReadError as exc:
        raise ManifestError(f"{label}: {exc}") from None
    cols = _map_columns(header, required=("filename", "ground_truth"), label=label,
                        columns={"filename": ("filename",), "ground_truth": ("ground_truth",)})
    base_dir = str(PurePosixPath(train_rel).parent)
    base = "" if base_dir in ("", ".") else base_dir + "/"
    entries: list[_Entry] = []
    seen: set[str] = set()

    def add(fname: str, line: int, identity: str | None, prefixes: Sequence[str]) -> None:
        name = display_prefix + (fname or f"{train_rel} line {line}")
        if not fname:
            entries.append(_Entry(name, error=f"line {line}: the filename is empty"))
            return
        if fname in seen:
            return
        seen.add(fname)
        reason = _unsafe_reason(fname)
        if reason:
            entries.append(_Entry(name, error=f"line {line}: refused: {reason} of the dataset folder"))
            return
        if identity and len(identity) > 200:
            entries.append(_Entry(name, error=f"line {line}: the identity name is longer than 200 characters"))
            return
        rel = tree.find(fname, prefixes=[base + p for p in prefixes])
        if rel is None:
            entries.append(_Entry(name, error=f"line {line}: listed in {PurePosixPath(train_rel).name if identity else _KAGGLE_TEST} but not found"))
            return
        entries.append(_Entry(name, read=_reader(tree, rel), identity=identity or None))

    for row in rows:
        add(row.values.get(cols["filename"], ""), row.line, row.values.get(cols["ground_truth"], "") or None,
            ("", "train/", "images/", "train_images/"))
    test_rel = base + _KAGGLE_TEST
    if tree.has(test_rel):
        try:
            theader, trows = _read_csv(tree.read(test_rel), label=display_prefix + test_rel)
            if "filename" in theader:
                tcols = ["filename"]
            elif "query_image" in theader and "gallery_image" in theader:
                tcols = ["query_image", "gallery_image"]
            else:
                raise ManifestError(
                    f"{display_prefix + test_rel}: needs a 'filename' column or 'query_image' and 'gallery_image' "
                    f"columns (found: {', '.join(theader)}); its images were not imported")
            for row in trows:
                for c in tcols:
                    add(row.values.get(c, ""), row.line, None, ("", "test/", "images/", "test_images/", "train/"))
        except ManifestError as exc:
            entries.append(_Entry(display_prefix + test_rel, error=str(exc)))
        except _ReadError as exc:
            entries.append(_Entry(display_prefix + test_rel, error=f"{display_prefix + test_rel}: {exc}"))
    return entries


def _folder_entries(tree: _Tree, *, display_prefix: str = "") -> list[_Entry]:
    """Photos of a folder tree: sub-folder (first level) = identity; top-level photos unassigned."""
    entries: list[_Entry] = []
    for rel in tree.files():
        name = display_prefix + rel
        ext = PurePosixPath(rel).suffix.lower()
        if ext not in IMAGE_EXTENSIONS:
            what = f"'{ext}'" if ext else "no extension"
            entries.append(_Entry(name, error=f"not a photo file type ({what}); skipped", error_status="skipped"))
            continue
        parts = rel.split("/")
        identity = parts[0].strip() if len(parts) > 1 else None
        entries.append(_Entry(name, read=_reader(tree, rel), identity=identity or None))
    return entries


def _tree_entries(tree: _Tree, *, display_prefix: str = "") -> tuple[str, list[_Entry]]:
    """Auto layout inside a tree (zip): Kaggle train.csv, manifest.csv, else folder."""
    if tree.has(_KAGGLE_TRAIN):
        return "kaggle", _kaggle_entries(tree, _KAGGLE_TRAIN, display_prefix=display_prefix)
    if tree.has(_MANIFEST_NAME):
        return "manifest", _manifest_entries(tree, _MANIFEST_NAME, display_prefix=display_prefix)
    return "folder", _folder_entries(tree, display_prefix=display_prefix)


def _csv_header(path: Path) -> list[str]:
    try:
        with open(path, "rb") as fh:
            header, _ = _read_csv(fh.read(64 * 1024).split(b"\n", 1)[0] + b"\n", label=path.name)
        return header
    except (OSError, ManifestError):
        return []


def detect_format(path: Path | str) -> str:
    """Which of FORMATS ``path`` is: a .zip is ``zip``; a CSV with ``ground_truth`` is ``kaggle``, other
    CSVs ``manifest``; a folder with ``train.csv`` is ``kaggle``, with ``manifest.csv`` ``manifest``,
    else ``folder``; anything else ``file``."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.is_dir():
        if (p / _KAGGLE_TRAIN).is_file() and "ground_truth" in _csv_header(p / _KAGGLE_TRAIN):
            return "kaggle"
        if (p / _MANIFEST_NAME).is_file():
            return "manifest"
        return "folder"
    suffix = p.suffix.lower()
    if suffix == ".zip" or (suffix not in IMAGE_EXTENSIONS and zipfile.is_zipfile(p)):
        return "zip"
    if suffix in (".csv", ".tsv"):
        header = _csv_header(p)
        return "kaggle" if "ground_truth" in header and "filename" in header else "manifest"
    return "file"


def _entries_for_path(path: Path, fmt: str) -> tuple[list[_Entry], list[_Tree], str]:
    """Entries, the trees to close afterwards and the layout actually used."""
    if fmt == "file":
        if not path.is_file():
            raise IngestError(f"{path}: --format file needs a single file")
        return [_Entry(path.name, read=_file_reader(path))], [], "file"
    if fmt == "folder":
        if not path.is_dir():
            raise IngestError(f"{path}: --format folder needs a folder")
        tree = _FolderTree(path)
        return _folder_entries(tree), [tree], "folder"
    if fmt == "zip":
        if not path.is_file():
            raise IngestError(f"{path}: --format zip needs a .zip file")
        tree = _ZipTree(path)
        try:
            layout, entries = _tree_entries(tree, display_prefix="")
        except BaseException:
            tree.close()
            raise
        return entries, [tree], f"zip ({layout})"
    if fmt in ("manifest", "kaggle"):
        csv_name = _MANIFEST_NAME if fmt == "manifest" else _KAGGLE_TRAIN
        csv_path = path / csv_name if path.is_dir() else path
        if not csv_path.is_file():
            raise IngestError(f"{path}: --format {fmt} needs a CSV file or a folder holding {csv_name}")
        tree = _FolderTree(csv_path.parent)
        if fmt == "manifest":
            return _manifest_entries(tree, csv_path.name), [tree], "manifest"
        return _kaggle_entries(tree, csv_path.name), [tree], "kaggle"
    raise IngestError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


# --------------------------------------------------------------------------- importing


METADATA_FIELDS = ("date", "place", "lat", "lon", "camera", "observer")


def metadata_changes(sighting: Sighting, facts: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, catalogue value, import value) for each sighting fact the import gives differently."""
    return [(a, getattr(sighting, a), facts[a]) for a in METADATA_FIELDS
            if facts.get(a) is not None and getattr(sighting, a) != facts[a]]


def _shown(value: Any) -> str:
    return "(none)" if value is None else repr(value) if isinstance(value, str) else str(value)


class _Importer:
    """Runs entries through decode -> blobs -> rows, one transaction per file."""

    def __init__(self, cat, *, user: str, dry_run: bool, origin: str, max_pixels: int = MAX_PIXELS,
                 update_metadata: bool = False) -> None:
        self.cat = cat
        self.user = user
        self.dry_run = dry_run
        self.update_metadata = update_metadata  # replace a known photo's sighting facts with the import's
        self.origin = origin
        self.max_pixels = max_pixels
        self.seen: dict[str, str] = {}  # content hash -> first name in this run (dry run)
        self.planned_individuals: set[str] = set()
        self.known_hashes: set[str] = set()  # content hashes catalogued when the run started
        self.run_hashes: set[str] = set()  # content hashes committed by this run
        # committed rows reused across files (strong references keep them in the session's identity map)
        self._ind_cache: dict[str, Individual] = {}  # individual name -> active individual
        self._sight_cache: dict[str, Sighting] = {}  # sighting key -> sighting
        self._user_known = False
        self._pending: dict[tuple[str, str], Any] = {}  # cache entries waiting for this file's commit

    # ---- helpers

    def _put(self, written: list[str], data: bytes, *, kind: str, ext: str, digest: str | None = None) -> str:
        """Store a blob; remember it for clean-up when it was not on disk before."""
        blobs = self.cat.blobs
        rel = blobs.relative_path(digest or sha256_bytes(data), kind=kind, ext=ext)
        existed = blobs.path(rel).exists()
        rel = blobs.put(data, kind=kind, ext=ext, digest=digest)
        if not existed:
            written.append(rel)
        return rel

    def _discard(self, session: Session, written: list[str]) -> None:
        """Remove blobs written for a failed file unless a committed image uses them."""
        for rel in written:
            used = session.scalar(select(Image.id).where(
                or_(Image.blob_path == rel, Image.thumb_path == rel, Image.mask_path == rel)).limit(1))
            if used is None:
                try:
                    self.cat.blobs.delete(rel)
                except (OSError, ValueError):  # pragma: no cover - best effort
                    pass

    def _individual(self, session: Session, name: str, *, species_id: int = 1) -> tuple[Individual, str]:
        """The individual called ``name`` (created in ``species_id`` if new; a merged one leads to its target)."""
        ind = self._ind_cache.get(name)
        if ind is not None and ind in session and ind.active and ind.name == name:
            return ind, ""
        ind = get_or_create_individual(session, name, user=self.user, species_id=species_id)
        note = ""
        hops = 0
        while not ind.active and ind.merged_into_id is not None and hops < 50:
            target = session.get(Individual, ind.merged_into_id)
            if target is None:
                break
            note = f"{name!r} was merged into {target.name!r}; assigned there"
            ind, hops = target, hops + 1
        if not ind.active:
            raise CatalogueError(f"the individual {name!r} was retired; reactivate or rename it first")
        if not note:
            self._pending[("ind", name)] = ind
        return ind, note

    def _species_id(self, session: Session, name: str | None) -> int:
        """The id of the species named in the manifest (created if new), else the default species."""
        if not name:
            return DEFAULT_SPECIES_ID
        from db.species import get_or_create_species

        return get_or_create_species(session, name).id

    def _assign(self, session: Session, img: Image, name: str) -> str:
        """Put ``img`` under the individual ``name`` and record the assign event; returns a note.

        The event has exactly the payload :func:`db.catalogue.assign_image` records
        (``image_id``, ``previous``, ``new``), so history and undo treat it like any
        assignment, plus ``via``/``source``/``name`` saying which import did it. It is
        written here (not through assign_image) to save statements on big imports:
        a new image gets its individual in its INSERT.
        """
        ind, note = self._individual(session, name, species_id=img.species_id)
        if ind.species_id != img.species_id:
            raise CatalogueError(f"the individual {ind.name!r} belongs to another species than this photo; "
                                 "check the manifest's species column")
        self._ensure_user(session)
        previous = img.individual_id
        img.individual_id = ind.id
        if img.id is None:
            session.flush()
        session.add(IdentityEvent(
            kind=EventKind.assign, individual_id=ind.id, other_individual_id=previous, user=self.user,
            created_at=utcnow(),
            payload={"image_id": img.id, "previous": previous, "new": ind.id, "via": "import",
                     "source": self.origin, "name": img.original_name},
        ))
        return note

    def _ensure_user(self, session: Session) -> None:
        if not self._user_known:
            get_or_create_user(session, self.user)
            self._pending[("user", self.user)] = 1

    def _sighting(self, session: Session, facts: dict[str, Any], decoded: DecodedImage | None) -> Sighting:
        """The sighting keyed ``facts['key']`` (created if new); fills fields it does not have yet."""
        s = self._sight_cache.get(facts["key"])
        if s is None or s not in session:
            s = session.scalar(select(Sighting).where(Sighting.key == facts["key"]))
        if s is None:
            s = Sighting(key=facts["key"])
            session.add(s)
        for attr in ("date", "place", "lat", "lon", "camera", "observer"):
            if getattr(s, attr) is None and facts.get(attr) is not None:
                setattr(s, attr, facts[attr])
        if s.date is None and decoded is not None and decoded.exif_time:
            s.date = decoded.exif_time
        if decoded is not None and s.lat is None and decoded.gps_lat is not None and decoded.gps_lon is not None:
            s.lat, s.lon = decoded.gps_lat, decoded.gps_lon
        self._pending[("sight", facts["key"])] = s
        return s

    def _commit(self, session: Session, digest: str | None = None) -> None:
        """Commit one file's transaction and remember what is now safely in the catalogue."""
        session.commit()
        for (kind, key), value in self._pending.items():
            if kind == "ind":
                self._ind_cache[key] = value
            elif kind == "sight":
                self._sight_cache[key] = value
            elif kind == "user":
                self._user_known = True
        self._pending.clear()
        if digest:
            self.run_hashes.add(digest)

    def _rollback(self, session: Session) -> None:
        session.rollback()
        self._pending.clear()

    def _lookup(self, session: Session, digest: str) -> Image | None:
        """The catalogued image with these bytes; skips the query for bytes unseen at start and in this run."""
        if digest not in self.known_hashes and digest not in self.run_hashes:
            return None
        return session.scalar(select(Image).where(Image.content_hash == digest))

    # ---- one file

    def prepare(self, e: _Entry) -> _Prepared:
        """Everything that needs no database: read, hash, decode, thumbnail, alpha mask.

        Runs in a helper thread ahead of the database work (PIL releases the GIL
        while decoding and resizing). Decoding is skipped for bytes the catalogue
        already had when the import started (a re-run costs a hash per file).
        """
        prep = _Prepared(e)
        if e.error is not None:
            prep.result = IngestItemResult(e.name, e.error_status, e.error)
            return prep
        assert e.read is not None
        try:
            data = e.read()
        except _ReadError as exc:
            prep.result = IngestItemResult(e.name, "error", str(exc))
            return prep
        if not data:
            prep.result = IngestItemResult(e.name, "error", "the file is empty (0 bytes)")
            return prep
        prep.data, prep.digest = data, sha256_bytes(data)
        if prep.digest not in self.known_hashes:
            self._decode(prep)
        return prep

    def _decode(self, prep: _Prepared) -> None:
        e = prep.entry
        try:
            prep.decoded = decode_image(prep.data, max_pixels=self.max_pixels)
            prep.thumb = make_thumbnail(prep.decoded.image)
            if prep.decoded.has_transparency:
                prep.mask_png, prep.quality = _alpha_mask(prep.decoded)
        except ImageDecodeError as exc:
            prep.result = IngestItemResult(e.name, "error", str(exc))
        except (OSError, ValueError, MemoryError) as exc:
            prep.result = IngestItemResult(e.name, "error", f"the picture could not be processed ({_short(exc)})")

    def handle(self, session: Session, prep: _Prepared) -> IngestItemResult:
        """The database part for one prepared file (one transaction)."""
        if prep.result is not None and prep.digest is None:
            return prep.result
        e = prep.entry
        existing = self._lookup(session, prep.digest)
        if existing is not None:
            return self._existing(session, e, existing)
        if self.dry_run and prep.digest in self.seen:
            return IngestItemResult(e.name, "duplicate", f"same bytes as {self.seen[prep.digest]!r} earlier in this import",
                                    same_as=self.seen[prep.digest])
        if prep.decoded is None and prep.result is None:
            self._decode(prep)  # known when the import started, gone since
        if prep.result is not None:
            return prep.result
        decoded = prep.decoded
        desc = _describe(decoded, e, mask=prep.mask_png is not None)
        if self.dry_run:
            self.seen[prep.digest] = e.name
            if e.identity and e.identity not in self.planned_individuals and find_individual_by_name(session, e.identity) is None:
                desc += " (new individual)"
                self.planned_individuals.add(e.identity)
            return IngestItemResult(e.name, "would-import", desc)
        return self._store(session, e, prep.data, prep.digest, decoded, prep.thumb, prep.mask_png, prep.quality, desc)

    def run_one(self, session: Session, e: _Entry) -> IngestItemResult:
        """Prepare and handle one entry in the calling thread."""
        return self.handle(session, self.prepare(e))

    def _store(self, session, e: _Entry, data: bytes, digest: str, decoded: DecodedImage, thumb: bytes,
               mask_png: bytes | None, quality, desc: str) -> IngestItemResult:
        written: list[str] = []
        try:
            blob = self._put(written, data, kind="images", ext=extension_for(decoded.format), digest=digest)
            thumb_rel = self._put(written, thumb, kind="thumbs", ext=".jpg", digest=digest)
            img = Image(
                content_hash=digest, original_name=e.name[:500], blob_path=blob, thumb_path=thumb_rel,
                format=decoded.format[:16], mode=decoded.mode[:16], width=decoded.width, height=decoded.height,
                size_bytes=len(data), exif_time=decoded.exif_time, gps_lat=decoded.gps_lat, gps_lon=decoded.gps_lon,
                flank=e.flank or Flank.unknown, flank_source="manifest" if e.flank else None,
                species_id=self._species_id(session, e.species),
            )
            if mask_png is not None:
                img.mask_path = self._put(written, mask_png, kind="masks", ext=".png")
                img.mask_source = "alpha"
                img.solidity = quality.solidity
                img.mask_flags = list(quality.flags)
                img.mask_details = {"rule": "alpha > threshold", "threshold": _alpha_threshold(),
                                    "area_fraction": quality.area_fraction, "n_components": quality.n_components}
            if e.sighting:
                img.sighting = self._sighting(session, e.sighting, decoded)
            session.add(img)
            note = self._assign(session, img, e.identity) if e.identity else ""
            session.flush()
            self._before_commit(session, img)
            self._commit(session, digest)
        except Exception as exc:  # any failure: this file leaves nothing behind
            self._rollback(session)
            self._discard(session, written)
            raced = session.scalar(select(Image).where(Image.content_hash == digest))
            if raced is not None:  # another import stored the same bytes meanwhile
                return self._existing(session, e, raced)
            return IngestItemResult(e.name, "error", f"could not be stored ({_short(exc)}); nothing was kept for this file")
        return IngestItemResult(e.name, "imported", desc + (f"; {note}" if note else "")
                                + (f"; warning: {e.warning}" if e.warning else ""), img.id)

    def _before_commit(self, session: Session, img: Image) -> None:
        """Hook for tests (fault injection after the blobs were written)."""

    def _existing(self, session: Session, e: _Entry, img: Image) -> IngestItemResult:
        """Same bytes already catalogued: fill in missing facts, report contradictions."""
        changes: list[str] = []
        notes: list[str] = []
        current = session.get(Individual, img.individual_id) if img.individual_id else None
        if e.identity:
            if current is None:
                changes.append(f"assigned to {e.identity}")
            elif current.name != e.identity:
                notes.append(f"it is catalogued as {current.name!r}, the import says {e.identity!r}: not changed")
        if e.flank:
            if img.flank == Flank.unknown:
                changes.append(f"flank {e.flank.value}")
            elif img.flank != e.flank:
                notes.append(f"its flank is {img.flank.value}, the import says {e.flank.value}: not changed")
        if e.sighting and img.sighting_id is None:
            changes.append(f"sighting {e.sighting['key']}")
        sighting = session.get(Sighting, img.sighting_id) if e.sighting and img.sighting_id is not None else None
        metadata = metadata_changes(sighting, e.sighting) if sighting is not None else []
        if metadata:
            words = ", ".join(f"{a} {_shown(old)} -> {_shown(new)}" for a, old, new in metadata)
            if self.update_metadata:
                changes.append(f"metadata of sighting {sighting.key}: {words}")
            else:
                notes.append(f"the import has other metadata ({words}): not changed; import again with "
                             "“update metadata of existing photos” to apply it")
        base = f"already in the catalogue as image #{img.id}"
        same_as = img.original_name if img.original_name != e.name else None
        if same_as:
            base = f"same bytes as {same_as!r}, already in the catalogue as image #{img.id}"
        if not changes:
            return IngestItemResult(e.name, "duplicate", "; ".join([base, *notes]), img.id, same_as=same_as)
        if self.dry_run:
            return IngestItemResult(e.name, "would-update", "; ".join([base, "would set " + ", ".join(changes), *notes]), img.id)
        try:
            note = ""
            if e.identity and current is None:
                note = self._assign(session, img, e.identity)
            if e.flank and img.flank == Flank.unknown:
                img.flank, img.flank_source = e.flank, "manifest"
            if e.sighting and img.sighting_id is None:
                img.sighting = self._sighting(session, e.sighting, None)
            if self.update_metadata:  # an audited change of the sighting (db.audit: sighting.metadata)
                for attr, _old, value in metadata:
                    setattr(sighting, attr, value)
            session.flush()
            self._commit(session)
        except Exception as exc:
            self._rollback(session)
            return IngestItemResult(e.name, "error", f"{base}; could not update it ({_short(exc)})", img.id)
        return IngestItemResult(e.name, "updated", "; ".join([base, "set " + ", ".join(changes), *notes, *([note] if note else [])]), img.id)

    # ---- many files

    def run(self, entries: Sequence[_Entry], *, progress: Progress | None = None,
            should_cancel: Callable[[], bool] | None = None, lookahead: int = PREFETCH) -> list[IngestItemResult]:
        """Every entry, in order; files are prepared ``lookahead`` ahead in one helper thread.

        When ``should_cancel()`` turns true the import stops between two files: what was
        imported stays (each file is its own transaction) and the rest is reported as skipped,
        so running the same import again picks up where it stopped. Every change is audited as this import's user.
        """
        with acting_as(self.user):
            return self._run(entries, progress=progress, should_cancel=should_cancel, lookahead=lookahead)

    def _run(self, entries: Sequence[_Entry], *, progress: Progress | None, should_cancel: Callable[[], bool] | None,
             lookahead: int) -> list[IngestItemResult]:
        results: list[IngestItemResult] = []
        total = len(entries)
        with self.cat.unit_of_work() as session:
            self.known_hashes = set(session.scalars(select(Image.content_hash)))
            session.rollback()
            with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest-prepare") as pool:
                queue: deque[Future[_Prepared]] = deque()
                upcoming = iter(entries)
                for e in itertools.islice(upcoming, max(1, lookahead)):
                    queue.append(pool.submit(self.prepare, e))
                i = 0
                while queue:
                    fut = queue.popleft()
                    nxt = next(upcoming, None)
                    if nxt is not None:
                        queue.append(pool.submit(self.prepare, nxt))
                    try:
                        prep = fut.result()
                        res = self.handle(session, prep)
                    except Exception as exc:  # a bug or DB outage for one file must not stop the batch
                        self._rollback(session)
                        res = IngestItemResult(entries[i].name, "error", f"unexpected problem ({_short(exc)})")
                    results.append(res)
                    if self.dry_run:
                        self._rollback(session)
                    i += 1
                    if progress is not None:
                        progress(i, total)
                    if should_cancel is not None and i < total and should_cancel():
                        for fut in queue:
                            fut.cancel()
                        results.extend(IngestItemResult(e.name, "skipped", "import stopped by the curator before "
                                                        "this file; import again to continue") for e in entries[i:])
                        break
        return results


@dataclass
class _Prepared:
    """A file read, hashed and decoded, waiting for its database transaction."""

    entry: _Entry
    data: bytes | None = None
    digest: str | None = None
    decoded: DecodedImage | None = None
    thumb: bytes | None = None
    mask_png: bytes | None = None
    quality: Any = None
    result: IngestItemResult | None = None  # set when the file already failed


def _alpha_threshold() -> int:
    from core.masking import ALPHA_THRESHOLD

    return int(ALPHA_THRESHOLD)


def _alpha_mask(decoded: DecodedImage):
    """Mask PNG bytes and quality of a transparent image: foreground = alpha > threshold."""
    from core.masking import encode_mask_png, mask_quality

    mask = decoded.alpha > _alpha_threshold()
    return encode_mask_png(mask), mask_quality(mask)


def _describe(decoded: DecodedImage, e: _Entry, *, mask: bool) -> str:
    bits = [f"{decoded.width}x{decoded.height} {decoded.format}"]
    if decoded.mode != "RGB":
        bits.append(f"mode {decoded.mode}")
    if e.identity:
        bits.append(f"-> {e.identity}")
    if e.flank:
        bits.append(f"{e.flank.value} flank")
    if e.sighting:
        bits.append(f"sighting {e.sighting['key']}")
    if mask:
        bits.append("alpha mask kept")
    if decoded.orientation != 1:
        bits.append("rotated upright")
    return ", ".join(bits)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:300]


def _finish(report: IngestReport, t0: float) -> IngestReport:
    report.seconds = time.perf_counter() - t0
    return report


def ingest_path(cat, path: str | Path, *, format: str | None = None, user: str, dry_run: bool = False,
                progress: Progress | None = None, should_cancel: Callable[[], bool] | None = None,
                max_pixels: int = MAX_PIXELS, update_metadata: bool = False) -> IngestReport:
    """Import a file, folder, zip, manifest CSV or Kaggle layout; one report line per file.

    ``format`` is one of FORMATS (auto-detected when None). With ``dry_run``
    every file is read and decoded but nothing is written (database or disk).
    ``progress(done, total)`` is called after each file. Raises IngestError /
    FileNotFoundError only when the import cannot start at all; a manifest that
    lacks required columns gives a report with that single error. With ``update_metadata`` the sighting facts
    (date, place, position, camera, observer) of photos already catalogued are replaced by the import's
    (an audited change); without it they are reported and left alone.
    """
    t0 = time.perf_counter()
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    fmt = format or detect_format(p)
    if fmt not in FORMATS:
        raise IngestError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    report = IngestReport(source=str(p), format=fmt, dry_run=dry_run)
    trees: list[_Tree] = []
    try:
        try:
            entries, trees, layout = _entries_for_path(p, fmt)
        except ManifestError as exc:
            report.items.append(IngestItemResult(p.name, "error", str(exc)))
            return _finish(report, t0)
        report.format = layout
        problems = [pr for t in trees for pr in t.problems]
        importer = _Importer(cat, user=user, dry_run=dry_run, origin=f"{layout}:{p.name}", max_pixels=max_pixels,
                             update_metadata=update_metadata)
        report.items.extend(problems)
        report.items.extend(importer.run(entries, progress=progress, should_cancel=should_cancel))
    finally:
        for t in trees:
            t.close()
    return _finish(report, t0)


def ingest_uploads(cat, files: Sequence[str | Path], *, manifest: str | Path | None = None, user: str,
                   dry_run: bool = False, progress: Progress | None = None,
                   should_cancel: Callable[[], bool] | None = None, update_metadata: bool = False) -> IngestReport:
    """Import files uploaded through the UI: photos and/or zips, with an optional manifest CSV.

    The manifest gives identity / flank / sighting by *original file name*
    (matched on the file name, folders ignored); its rows naming no uploaded file
    are reported as errors. Uploaded zips are read like ``--format zip``.
    """
    t0 = time.perf_counter()
    report = IngestReport(source=f"{len(files)} uploaded file(s)", format="upload", dry_run=dry_run)
    trees: list[_Tree] = []
    entries: list[_Entry] = []
    try:
        for f in files:
            p = Path(f)
            if p.suffix.lower() == ".zip" or (p.suffix.lower() not in IMAGE_EXTENSIONS and p.is_file() and zipfile.is_zipfile(p)):
                try:
                    tree = _ZipTree(p)
                except IngestError as exc:
                    report.items.append(IngestItemResult(p.name, "error", str(exc)))
                    continue
                trees.append(tree)
                try:
                    _, zentries = _tree_entries(tree, display_prefix=f"{p.name}/")
                except ManifestError as exc:
                    report.items.append(IngestItemResult(p.name, "error", str(exc)))
                    continue
                report.items.extend(IngestItemResult(f"{p.name}/{pr.name}", pr.status, pr.message) for pr in tree.problems)
                entries.extend(zentries)
            elif p.suffix.lower() in (".csv", ".tsv") and manifest is None:
                manifest = p
            else:
                entries.append(_Entry(p.name, read=_file_reader(p)))
        if manifest is not None:
            mpath = Path(manifest)
            try:
                header, rows = _read_csv(mpath.read_bytes(), label=mpath.name)
                cols = _map_columns(header, required=MANIFEST_REQUIRED, label=mpath.name)
            except (ManifestError, OSError) as exc:
                report.items.append(IngestItemResult(mpath.name, "error", str(exc)))
                return _finish(report, t0)
            by_name: dict[str, _Entry] = {}
            for e in entries:
                by_name.setdefault(PurePosixPath(e.name).name.lower(), e)
            for row in rows:
                fname = row.values.get(cols["filename"], "").strip()
                key = PurePosixPath(fname.replace("\\", "/")).name.lower()
                target = by_name.get(key)
                if target is None:
                    report.items.append(IngestItemResult(fname or f"{mpath.name} line {row.line}", "error",
                                                         f"line {row.line}: listed in the manifest but not among the uploaded files"))
                    continue
                try:
                    identity, flank, sighting, species = _row_facts(row, cols)
                except ValueError as exc:
                    target.error = f"line {row.line}: {exc}"
                    continue
                target.species = species or target.species
                # the manifest adds what it states; blank cells keep what the zip layout said
                target.identity = identity or target.identity
                target.flank = flank or target.flank
                target.sighting = sighting or target.sighting
        importer = _Importer(cat, user=user, dry_run=dry_run, origin="upload", update_metadata=update_metadata)
        report.items.extend(importer.run(entries, progress=progress, should_cancel=should_cancel))
    finally:
        for t in trees:
            t.close()
    return _finish(report, t0)
