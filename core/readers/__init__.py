"""Reading what an import brings: files, folders, zips, CSV manifests, Kaggle layouts (pure: files in, entries out).

Formats (:func:`detect_format` picks one; ``--format`` overrides): ``file``, ``folder`` (its first-level
sub-folders mean what :data:`FOLDER_MEANINGS` allows), ``zip``, ``manifest``, ``camtrap-dp``
(:mod:`core.readers.camtrapdp`) and ``kaggle``. Each reader turns its source into :class:`Entry` objects (a
name, how to read the bytes, and the facts the source states), and :func:`prepare_entry` reads, hashes and
decodes one. Client paths are never trusted: zip members with ``..`` or absolute paths, links leaving the folder
and manifest rows pointing outside it are refused. Storing the photos is the store's part (``db.io.ingest``).

Each format's layout and columns: docs/io.md."""

from __future__ import annotations

from core.readers.base import (
    MAX_FILE_BYTES,
    Entry,
    IngestError,
    ManifestError,
    ReadError,
    Tree,
    file_reader,
    tree_reader,
    unsafe_reason,
)
from core.readers.camtrapdp import CamtrapDPError, CamtrapPackage, MediaObservations, Observation, read_camtrapdp
from core.readers.detect import FORMATS, detect_format, entries_for_path, tree_entries
from core.readers.folder import (
    FOLDER_MEANINGS,
    FolderCounts,
    FolderTree,
    folder_counts,
    folder_entries,
    give_folders_meaning,
)
from core.readers.kaggle import KAGGLE_TEST, KAGGLE_TRAIN, kaggle_entries
from core.readers.manifest import (
    FLANK_WORDS,
    MANIFEST_COLUMNS,
    MANIFEST_NAME,
    MANIFEST_REQUIRED,
    ManifestRow,
    manifest_entries,
    map_columns,
    parse_flank,
    read_csv,
    row_facts,
)
from core.readers.prepare import Prepared, decode_prepared, describe, prepare_entry, short_error
from core.readers.report import STATUSES, ImportTally, IngestItemResult, IngestReport
from core.readers.uploads import Upload, upload_entries
from core.readers.zipped import ZipTree

__all__ = [
    "FLANK_WORDS", "FOLDER_MEANINGS", "FORMATS", "FolderCounts", "ImportTally", "folder_counts",
    "give_folders_meaning", "CamtrapDPError", "CamtrapPackage", "MediaObservations", "Observation",
    "read_camtrapdp", "KAGGLE_TEST", "KAGGLE_TRAIN", "MANIFEST_COLUMNS", "MANIFEST_NAME", "MANIFEST_REQUIRED",
    "MAX_FILE_BYTES", "STATUSES", "Entry", "FolderTree", "IngestError", "IngestItemResult", "IngestReport",
    "ManifestError", "ManifestRow", "Prepared", "ReadError", "Tree", "Upload", "ZipTree", "decode_prepared",
    "describe", "detect_format", "entries_for_path", "file_reader", "folder_entries", "kaggle_entries",
    "manifest_entries", "map_columns", "parse_flank", "prepare_entry", "read_csv", "row_facts", "short_error",
    "tree_entries", "tree_reader", "unsafe_reason", "upload_entries",
]
