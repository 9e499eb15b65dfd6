"""Requests of the imports: uploaded files (the Ingest tab) and a path on this machine (``rosette import``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.annotations import DEFAULT_MIN_CONFIDENCE
from core.field.detectors import check_detector_name
from core.readers.folder import FOLDER_MEANINGS
from core.requests import Request
from core.field.stations import EVENT_GAP_S


def _check_detections(request: ImportUploadsRequest | ImportPathRequest) -> None:
    if getattr(request, "detector", None) is not None:
        if request.detections is not None:
            raise ValueError("boxes come from a detections file (--detections) or a detector (--detector), not both")
        check_detector_name(request.detector)
    """The MegaDetector options both imports share: a threshold in [0, 1], and no empty frames kept without a
    detections file (without one no frame is empty)."""
    if request.detections is not None:
        object.__setattr__(request, "detections", str(request.detections))
    if not 0.0 <= float(request.min_confidence) <= 1.0:
        raise ValueError(f"the minimum confidence (--min-confidence) must be between 0 and 1, "
                         f"got {request.min_confidence}")
    # a Camtrap DP package says which frames are empty itself (an auto-detected path, or an uploaded zip, is
    # checked by the import)
    package = getattr(request, "format", "") in (None, "camtrap-dp") or any(
        str(p).lower().endswith(".zip") for p in getattr(request, "paths", ()))
    if request.keep_empty and request.detections is None and getattr(request, "detector", None) is None \
            and not package:
        raise ValueError("keeping empty frames (--keep-empty) needs a MegaDetector output file (--detections) or a "
                         "Camtrap DP package: without one no frame is empty")


#: The longest species name an import may set (as db.species allows).
MAX_SPECIES_NAME = 120


def _check_species(request: ImportUploadsRequest | ImportPathRequest) -> None:
    """The species an import sets: blank is none (each photo keeps what its source says, else the default
    species); a name too long or with control characters is refused before anything is read."""
    name = " ".join(str(request.species or "").split())
    if len(name) > MAX_SPECIES_NAME or any(ord(c) < 32 for c in name):
        raise ValueError(f"a species name is up to {MAX_SPECIES_NAME} printable characters")
    object.__setattr__(request, "species", name or None)


def _check_folders(folders: str) -> None:
    if folders not in FOLDER_MEANINGS:
        raise ValueError(f"what the zip's folders are must be one of {', '.join(FOLDER_MEANINGS)}, got {folders!r}")


@dataclass(frozen=True)
class ImportUploadsRequest(Request):
    """Import uploaded photos / zips (their paths on the server, named as uploaded) and an optional manifest CSV.

    ``update_metadata``: photos already in the catalogue take the manifest's sighting details (audited).
    ``folders``: what a zip's first-level folders are (``stations``, ``individuals`` or ``none``: never
    individuals unless chosen). ``species``: the species of what comes in (created if new)."""

    paths: tuple[str, ...]
    user: str
    manifest: str | None = None
    update_metadata: bool = False
    detections: str | None = None  # a MegaDetector batch-output JSON: each animal box becomes an annotation
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    keep_empty: bool = False  # keep frames with no animal box (as photos without annotations)
    folders: str = "none"
    species: str | None = None

    def __post_init__(self) -> None:
        paths = tuple(str(p) for p in (self.paths or ()))
        if not paths:
            raise ValueError("Choose some photos or a zip archive to import first.")
        object.__setattr__(self, "paths", paths)
        _check_detections(self)
        _check_folders(self.folders)
        _check_species(self)


@dataclass(frozen=True)
class PreviewFoldersRequest(Request):
    """What the uploaded zips' first-level folders are, read as ``folders`` (the Ingest tab's preview, before
    anything is imported; None: as the preview suggests, stations when every folder names one, else nothing); no
    paths: nothing to say."""

    paths: tuple[str, ...] = ()
    folders: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "paths", tuple(str(p) for p in (self.paths or ())))
        if self.folders is not None:
            _check_folders(self.folders)


@dataclass(frozen=True)
class ImportPathRequest(Request):
    """Import a photo, folder, zip, CSV manifest or Kaggle layout on this machine (``format`` None: detected);
    ``dry_run`` checks every file and writes nothing."""

    path: str
    user: str
    format: str | None = None
    dry_run: bool = False
    update_metadata: bool = False
    detections: str | None = None  # a MegaDetector batch-output JSON: each animal box becomes an annotation
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    keep_empty: bool = False  # keep frames with no animal box (as photos without annotations)
    detector: str | None = None  # run this registered detector (its weights here) for the boxes
    event_gap_s: float = EVENT_GAP_S  # photos of one deployment this close in time (seconds) form one event
    layout: str = "auto"  # a folder's sub-folders: "individuals", "stations" (Station/...), "none" or "auto"
    species: str | None = None  # the species of what comes in (created if new)

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", str(self.path))
        _check_detections(self)
        try:
            gap = float(self.event_gap_s)
        except (TypeError, ValueError):
            raise ValueError(f"the event gap (--event-gap) must be a number of seconds, got {self.event_gap_s!r}") \
                from None
        if not (gap >= 0 and gap != float("inf")):
            raise ValueError(f"the event gap (--event-gap) must be 0 seconds or more, got {self.event_gap_s}")
        object.__setattr__(self, "event_gap_s", gap)
        if self.layout not in ("auto", *FOLDER_MEANINGS):
            raise ValueError(f"unknown layout {self.layout!r}: choose auto, {', '.join(FOLDER_MEANINGS)}")
        _check_species(self)
