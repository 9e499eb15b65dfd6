"""Kaggle layouts: ``train.csv`` (``filename,ground_truth``) and optional ``test.csv``
(``row_id,query_image,gallery_image`` or ``filename``); images next to the CSVs or in ``train/``, ``test/`` or
``images/``. The train rows are imported with their identities, then the test images without."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import PurePosixPath

from core.readers.base import Entry, ManifestError, ReadError, Tree, tree_reader, unsafe_reason
from core.readers.manifest import map_columns, read_csv

KAGGLE_TRAIN = "train.csv"
KAGGLE_TEST = "test.csv"


def kaggle_entries(tree: Tree, train_rel: str, *, display_prefix: str = "") -> list[Entry]:
    """Entries of a Kaggle layout: train.csv rows with identities, then test.csv images without."""
    label = display_prefix + train_rel
    try:
        header, rows = read_csv(tree.read(train_rel), label=label)
    except ReadError as exc:
        raise ManifestError(f"{label}: {exc}") from None
    cols = map_columns(header, required=("filename", "ground_truth"), label=label,
                       columns={"filename": ("filename",), "ground_truth": ("ground_truth",)})
    base_dir = str(PurePosixPath(train_rel).parent)
    base = "" if base_dir in ("", ".") else base_dir + "/"
    entries: list[Entry] = []
    seen: set[str] = set()

    def add(fname: str, line: int, identity: str | None, prefixes: Sequence[str]) -> None:
        name = display_prefix + (fname or f"{train_rel} line {line}")
        if not fname:
            entries.append(Entry(name, error=f"line {line}: the filename is empty"))
            return
        if fname in seen:
            return
        seen.add(fname)
        reason = unsafe_reason(fname)
        if reason:
            entries.append(Entry(name, error=f"line {line}: refused: {reason} of the dataset folder"))
            return
        if identity and len(identity) > 200:
            entries.append(Entry(name, error=f"line {line}: the identity name is longer than 200 characters"))
            return
        rel = tree.find(fname, prefixes=[base + p for p in prefixes])
        if rel is None:
            entries.append(Entry(name, error=f"line {line}: listed in {PurePosixPath(train_rel).name if identity else KAGGLE_TEST} but not found"))
            return
        entries.append(Entry(name, read=tree_reader(tree, rel), identity=identity or None))

    for row in rows:
        add(row.values.get(cols["filename"], ""), row.line, row.values.get(cols["ground_truth"], "") or None,
            ("", "train/", "images/", "train_images/"))
    test_rel = base + KAGGLE_TEST
    if tree.has(test_rel):
        try:
            theader, trows = read_csv(tree.read(test_rel), label=display_prefix + test_rel)
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
            entries.append(Entry(display_prefix + test_rel, error=str(exc)))
        except ReadError as exc:
            entries.append(Entry(display_prefix + test_rel, error=f"{display_prefix + test_rel}: {exc}"))
    return entries
