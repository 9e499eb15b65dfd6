"""Which layout a path holds (:func:`detect_format`), and the entries of a path in a given layout
(:func:`entries_for_path`)."""

from __future__ import annotations

import zipfile
from pathlib import Path

from core.io.images import IMAGE_EXTENSIONS
from core.readers.base import Entry, IngestError, ManifestError, Tree, file_reader
from core.readers.camtrapdp import DATAPACKAGE_NAME, read_camtrapdp
from core.readers.folder import FolderTree, folder_entries
from core.readers.kaggle import KAGGLE_TRAIN, kaggle_entries
from core.readers.manifest import MANIFEST_NAME, csv_header, manifest_entries
from core.readers.zipped import ZipTree

FORMATS = ("file", "folder", "zip", "manifest", "kaggle", "camtrap-dp")


def tree_entries(tree: Tree, *, display_prefix: str = "") -> tuple[str, list[Entry]]:
    """Auto layout inside a tree (zip): Kaggle train.csv, manifest.csv, else folder. A Camtrap DP package is
    refused (ManifestError): read as photos alone, its observations would be lost."""
    if tree.has(DATAPACKAGE_NAME):
        raise ManifestError(f"{display_prefix.rstrip('/') or tree.label}: this is a Camtrap DP package "
                            f"({DATAPACKAGE_NAME}); read as photos alone its observations, deployments and events "
                            "would be lost, so nothing was imported: import it with "
                            "'rosette import PATH --format camtrap-dp'")
    if tree.has(KAGGLE_TRAIN):
        return "kaggle", kaggle_entries(tree, KAGGLE_TRAIN, display_prefix=display_prefix)
    if tree.has(MANIFEST_NAME):
        return "manifest", manifest_entries(tree, MANIFEST_NAME, display_prefix=display_prefix)
    return "folder", folder_entries(tree, display_prefix=display_prefix)


def detect_format(path: Path | str) -> str:
    """Which of FORMATS ``path`` is: a datapackage.json, a folder or a zip holding one is ``camtrap-dp``; a .zip
    is ``zip``; a CSV with ``ground_truth`` is ``kaggle``, other CSVs ``manifest``; a folder with ``train.csv`` is
    ``kaggle``, with ``manifest.csv`` ``manifest``, else ``folder``; anything else ``file``."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.name == DATAPACKAGE_NAME and p.is_file():
        return "camtrap-dp"
    if p.is_dir():
        if (p / DATAPACKAGE_NAME).is_file():
            return "camtrap-dp"
        if (p / KAGGLE_TRAIN).is_file() and "ground_truth" in csv_header(p / KAGGLE_TRAIN):
            return "kaggle"
        if (p / MANIFEST_NAME).is_file():
            return "manifest"
        return "folder"
    suffix = p.suffix.lower()
    if suffix == ".zip" or (suffix not in IMAGE_EXTENSIONS and zipfile.is_zipfile(p)):
        return "camtrap-dp" if _zip_has_datapackage(p) else "zip"
    if suffix in (".csv", ".tsv"):
        header = csv_header(p)
        return "kaggle" if "ground_truth" in header and "filename" in header else "manifest"
    return "file"


def _zip_has_datapackage(path: Path) -> bool:
    """Whether a zip holds a datapackage.json at its top (or inside a single top folder)."""
    try:
        tree = ZipTree(path)
    except IngestError:
        return False
    try:
        return tree.has(DATAPACKAGE_NAME)
    finally:
        tree.close()


def entries_for_path(path: Path, fmt: str) -> tuple[list[Entry], list[Tree], str]:
    """Entries, the trees to close afterwards and the layout actually used."""
    if fmt == "file":
        if not path.is_file():
            raise IngestError(f"{path}: --format file needs a single file")
        return [Entry(path.name, read=file_reader(path))], [], "file"
    if fmt == "folder":
        if not path.is_dir():
            raise IngestError(f"{path}: --format folder needs a folder")
        tree = FolderTree(path)
        return folder_entries(tree), [tree], "folder"
    if fmt == "zip":
        if not path.is_file():
            raise IngestError(f"{path}: --format zip needs a .zip file")
        tree = ZipTree(path)
        try:
            layout, entries = tree_entries(tree, display_prefix="")
        except BaseException:
            tree.close()
            raise
        return entries, [tree], f"zip ({layout})"
    if fmt in ("manifest", "kaggle"):
        csv_name = MANIFEST_NAME if fmt == "manifest" else KAGGLE_TRAIN
        csv_path = path / csv_name if path.is_dir() else path
        if not csv_path.is_file():
            raise IngestError(f"{path}: --format {fmt} needs a CSV file or a folder holding {csv_name}")
        tree = FolderTree(csv_path.parent)
        if fmt == "manifest":
            return manifest_entries(tree, csv_path.name), [tree], "manifest"
        return kaggle_entries(tree, csv_path.name), [tree], "kaggle"
    if fmt == "camtrap-dp":  # the entries only: db.io.ingest reads the package's observations with them
        package = read_camtrapdp(path)
        return package.entries, [package.tree], "camtrap-dp"
    raise IngestError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
