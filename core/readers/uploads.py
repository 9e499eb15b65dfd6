"""Files uploaded through the UI: photos and/or zips, with an optional manifest CSV that gives identity / flank /
sighting by *original file name* (matched on the file name, folders ignored)."""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from core.io.images import IMAGE_EXTENSIONS
from core.readers.base import Entry, IngestError, ManifestError, Tree, file_reader
from core.readers.detect import tree_entries
from core.readers.folder import FOLDER_MEANINGS, FolderCounts, folder_counts, give_folders_meaning
from core.readers.manifest import MANIFEST_REQUIRED, map_columns, read_csv, row_facts, row_station
from core.readers.report import IngestItemResult
from core.readers.zipped import ZipTree


@dataclass
class Upload:
    """The entries of an upload, the zips to close once imported, and the problems found reading it."""

    entries: list[Entry] = field(default_factory=list)
    trees: list[Tree] = field(default_factory=list)
    items: list[IngestItemResult] = field(default_factory=list)
    refused: bool = False  # the manifest cannot be used: nothing is to be imported
    # the zips' first-level folders (photo counts, merged across zips: one station's folder in two zips is one
    # station) as found, before they were given their meaning; zips of another layout (a manifest) are left out
    folders: FolderCounts = field(default_factory=lambda: FolderCounts({}))

    def close(self) -> None:
        for t in self.trees:
            t.close()


def upload_entries(files: Sequence[str | Path], *, manifest: str | Path | None = None,
                   folders: str = "none") -> Upload:
    """The entries of uploaded photos and zips (a zip read like ``--format zip``; a CSV among the files is the
    manifest when none is given). ``folders`` says what a zip's first-level folders mean (one of
    :data:`core.readers.folder.FOLDER_MEANINGS`; by default nothing: a folder name never becomes an individual
    unasked). The manifest's rows naming no uploaded file are reported as errors; a
    manifest that cannot be read refuses the whole upload. Close the returned :class:`Upload` when done."""
    if folders not in FOLDER_MEANINGS:
        raise IngestError(f"unknown folder meaning {folders!r}; choose one of {', '.join(FOLDER_MEANINGS)}")
    up = Upload()
    found: dict[str, int] = {}
    loose = 0
    try:
        for f in files:
            p = Path(f)
            if p.suffix.lower() == ".zip" or (p.suffix.lower() not in IMAGE_EXTENSIONS and p.is_file() and zipfile.is_zipfile(p)):
                try:
                    tree = ZipTree(p)
                except IngestError as exc:
                    up.items.append(IngestItemResult(p.name, "error", str(exc)))
                    continue
                up.trees.append(tree)
                try:
                    layout, zentries = tree_entries(tree, display_prefix=f"{p.name}/")
                except ManifestError as exc:
                    up.items.append(IngestItemResult(p.name, "error", str(exc)))
                    continue
                if layout == "folder":
                    counts = folder_counts(zentries)
                    for name, n in counts.folders.items():
                        found[name] = found.get(name, 0) + n
                    loose += counts.loose
                    zentries = give_folders_meaning(zentries, folders)
                up.items.extend(IngestItemResult(f"{p.name}/{pr.name}", pr.status, pr.message) for pr in tree.problems)
                up.entries.extend(zentries)
            elif p.suffix.lower() in (".csv", ".tsv") and manifest is None:
                manifest = p
            else:
                up.entries.append(Entry(p.name, read=file_reader(p)))
        up.folders = FolderCounts(dict(sorted(found.items())), loose)
        if manifest is not None:
            mpath = Path(manifest)
            try:
                header, rows = read_csv(mpath.read_bytes(), label=mpath.name)
                cols = map_columns(header, required=MANIFEST_REQUIRED, label=mpath.name)
            except (ManifestError, OSError) as exc:
                up.items.append(IngestItemResult(mpath.name, "error", str(exc)))
                up.refused = True
                return up
            by_name: dict[str, Entry] = {}
            for e in up.entries:
                by_name.setdefault(PurePosixPath(e.name).name.lower(), e)
            for row in rows:
                fname = row.values.get(cols["filename"], "").strip()
                key = PurePosixPath(fname.replace("\\", "/")).name.lower()
                target = by_name.get(key)
                if target is None:
                    up.items.append(IngestItemResult(fname or f"{mpath.name} line {row.line}", "error",
                                                     f"line {row.line}: listed in the manifest but not among the uploaded files"))
                    continue
                try:
                    identity, flank, sighting, species = row_facts(row, cols)
                    deployment, taken_at, sighting = row_station(row, cols, sighting)
                except ValueError as exc:
                    target.error = f"line {row.line}: {exc}"
                    continue
                target.species = species or target.species
                # the manifest adds what it states; blank cells keep what the zip layout said
                target.identity = identity or target.identity
                target.flank = flank or target.flank
                target.sighting = sighting or target.sighting
                target.deployment = deployment or target.deployment
                target.taken_at = taken_at or target.taken_at
    except BaseException:
        up.close()
        raise
    return up
