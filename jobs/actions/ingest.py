"""Imports: uploaded photos and zips (the Ingest tab) and a path on this machine (``rosette import``), and the
background job that computes the new photos' match-review features ahead."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from core.readers import FORMATS, IngestReport
from core.readers.report import about_words
from db.embeddings import annotation_ids_after, count_animals, last_annotation_id
from db.io.ingest import KEEP_EMPTY_TAB, FolderPreview, ingest_path, ingest_uploads, upload_folders
from db.models import JobStatus
from db.session import Catalogue
from db.species import active_model_name
from jobs.actions.common import curator_name
from jobs.queue import list_jobs, submit
from jobs.requests.ingest import ImportPathRequest, ImportUploadsRequest, PreviewFoldersRequest
from jobs.requests.map import EmbedRequest

__all__ = ["FORMATS", "IMPORT_STOPS", "REPORT_HEADERS", "FoldersPreview", "ImportOutcome", "StopRequests",
           "import_path", "import_uploads", "preview_folders", "warm_features"]

REPORT_HEADERS = ["File", "Result", "Details"]

Progress = Callable[[int, int], None]


@dataclass
class ImportOutcome:
    rows: list[list[str]]  # under REPORT_HEADERS
    counts: dict[str, int]
    features_job: int | None = None  # the background job computing match-review features of the new photos
    features_of: str | None = None  # what that job embeds, in words: "3 animals in 2 photos" (only the new ones)
    tally: str = ""  # photos, animals, people blurred, boxes left out and empty frames, in the tab's words
    # the report's lines about the import as a whole (a Camtrap DP package's deployments, notes and errors), by
    # status: not files, so not in ``counts``
    about_import: dict[str, int] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        shown = [f"{n} {status if status != 'error' else ('errors' if n != 1 else 'error')}"
                 for status, n in self.counts.items() if n]
        text = " · ".join(shown) if shown else "nothing to import"
        if self.tally:
            text += f" — {self.tally}"
        if self.about_import:
            text += f" · about the import as a whole: {about_words(self.about_import)}"
        if self.features_job is not None:
            what = f"the features of its {self.features_of}" if self.features_of else "their features"
            text += f" · {what} for match review are being computed in the background (job #{self.features_job})"
        return text


class StopRequests:
    """Stop buttons for long handlers: keyed by browser session, thread-safe.

    A running handler cannot see a later change to a ``gr.State``, so the Stop button
    records its session here and the running handler's ``should_cancel`` reads it."""

    def __init__(self) -> None:
        self._keys: set[str] = set()
        self._lock = threading.Lock()

    def request(self, key: str | None) -> None:
        with self._lock:
            self._keys.add(key or "")

    def clear(self, key: str | None) -> None:
        with self._lock:
            self._keys.discard(key or "")

    def checker(self, key: str | None) -> Callable[[], bool]:
        return lambda: (key or "") in self._keys


IMPORT_STOPS = StopRequests()


def import_uploads(cat: Catalogue, request: ImportUploadsRequest, *, progress: Progress | None = None,
                   should_cancel: Callable[[], bool] | None = None) -> ImportOutcome:
    """Import uploaded photos / zips (and an optional manifest CSV) and report per file.

    Gradio stores each upload as ``<upload dir>/<hash>/<original file name>``, so
    the basenames handed on are the names a manifest refers to. ``progress(done, total)``
    is called after each file.
    """
    user = curator_name(request.user)
    before = last_annotation_id(cat)  # the import's new animals are those numbered above it
    report = ingest_uploads(cat, list(request.paths), manifest=request.manifest, user=user, progress=progress,
                            should_cancel=should_cancel, update_metadata=request.update_metadata,
                            detections=request.detections, min_confidence=request.min_confidence,
                            keep_empty=request.keep_empty, folders=request.folders, species=request.species)
    new = count_animals(cat, annotation_ids_after(cat, before))
    # only the animals this import added are embedded: a re-import that added none queues nothing
    warm = warm_features(cat, user=user, image_ids=new.annotation_ids) if new.annotation_ids else None
    return ImportOutcome(rows=[[str(c) for c in row] for row in report.rows()], counts=dict(report.counts),
                         features_job=warm, features_of=new.words if warm is not None else None,
                         tally=report.tally.words(keep_empty=KEEP_EMPTY_TAB), about_import=report.about_counts)


def import_path(cat: Catalogue, request: ImportPathRequest, *, progress: Progress | None = None) -> IngestReport:
    """Import a photo, folder, zip, manifest or Kaggle layout on this machine; the report of every file."""
    return ingest_path(cat, request.path, format=request.format, user=curator_name(request.user),
                       dry_run=request.dry_run, progress=progress, update_metadata=request.update_metadata,
                       detections=request.detections, min_confidence=request.min_confidence,
                       keep_empty=request.keep_empty, detector=request.detector, event_gap_s=request.event_gap_s,
                       layout=request.layout, species=request.species)


@dataclass(frozen=True)
class FoldersPreview:
    """What the Ingest tab says about the uploaded files and their zips' folders before importing: how many files
    the upload holds, the folders read as ``chosen`` (the request's meaning, else the one suggested), and the
    meaning suggested (``stations`` when every folder names a stored station, else ``none``; never
    ``individuals``)."""

    words: str
    suggested: str
    chosen: str
    folders: tuple[str, ...] = ()
    files_words: str = ""


def _names(counts: dict[str, int], names: list[str] | tuple[str, ...], *, limit: int = 8) -> str:
    shown = [f"{n} ({counts[n]} photo{'s' if counts[n] != 1 else ''})" for n in names[:limit]]
    return ", ".join(shown) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def preview_folders(cat: Catalogue, request: PreviewFoldersRequest) -> FoldersPreview:
    """Say what the uploaded zips' first-level folders are and what importing them as ``request.folders`` does:
    stations (which deployments they match, which match none), individuals (new or catalogued) or nothing. Reads
    the zips' listings only; nothing is imported."""
    chosen = request.folders or "none"
    if not request.paths:
        return FoldersPreview("", "none", chosen)
    files = _files_words(request.paths)
    found: FolderPreview = upload_folders(cat, request.paths)
    chosen = request.folders or found.suggested
    counts = found.folders.folders
    names = list(counts)
    loose = found.folders.loose
    outside = f" {loose} photo{'s are' if loose != 1 else ' is'} outside any folder." if loose else ""
    if not names:
        return FoldersPreview(("No folders in the uploaded zips: the photos come in unassigned." + outside)
                              if loose else "", "none", chosen, files_words=files)
    n = len(names)
    matching = [x for x in names if x in found.stations]
    unmatched = [x for x in names if x not in found.stations]
    if chosen == "stations":
        words = f"**{n} station folder{'s' if n != 1 else ''}:** {_names(counts, names)}."
        if matching:
            deps = "; ".join(f"{x} → {', '.join(found.stations[x])}" for x in matching[:8])
            words += f" Matching deployments: {deps}" + (" ..." if len(matching) > 8 else "") + "."
        if unmatched:
            where = ("no deployments are stored yet" if not found.deployments
                     else "they name no station of the Deployments tab")
            words += (f" {', '.join(unmatched[:8])}{' ...' if len(unmatched) > 8 else ''}: {where}, so their "
                      "photos come in without a deployment (add the deployments in the Deployments tab first).")
    elif chosen == "individuals":
        known = [x for x in names if x in found.individuals]
        new = [x for x in names if x not in found.individuals]
        become = "1 folder becomes an individual" if n == 1 else f"{n} folders become individuals"
        words = f"**{become}:** {_names(counts, names)}."
        if new:
            words += f" New: {', '.join(new[:8])}{' ...' if len(new) > 8 else ''}."
        if known:
            words += f" Already catalogued: {', '.join(known[:8])}{' ...' if len(known) > 8 else ''}."
        if matching:
            words += (f" Careful: {', '.join(matching[:8])} name{'s' if len(matching) == 1 else ''} stations of the "
                      "Deployments tab; choose \"stations\" if these are camera stations.")
    else:
        words = (f"**{n} folder{'s' if n != 1 else ''} not read:** {_names(counts, names)}; their photos come in "
                 "unassigned, without a deployment.")
        if matching and not unmatched:
            words += " They match stations of the Deployments tab: choose \"stations\" to link the photos to them."
    return FoldersPreview(words + outside, found.suggested, chosen, tuple(names), files)


def _files_words(paths: tuple[str, ...]) -> str:
    """``3 files in the upload box: 1 zip, 2 photos or other files``."""
    zips = sum(1 for p in paths if p.lower().endswith(".zip"))
    others = len(paths) - zips
    parts = ([f"{zips} zip{'s' if zips != 1 else ''}"] if zips else []) + \
        ([f"{others} photo{'s' if others != 1 else ''} or other file{'s' if others != 1 else ''}"] if others else [])
    return f"**{len(paths)} file{'s' if len(paths) != 1 else ''} in the upload box:** {', '.join(parts)}"


def warm_features(cat: Catalogue, *, user: str, image_ids: Sequence[int] | None = None) -> int | None:
    """Queue the active model's features in the background (the ``embed`` job) of the annotations ``image_ids``
    (an import's new animals), or of every photo when None, so the first Match review opening after an import
    finds them instead of computing them while the curator waits. Returns the job id, or None when a job of every
    photo is already waiting (it will include these)."""
    model = active_model_name(cat)
    waiting = any(j.status == JobStatus.queued and (j.params or {}).get("backbone") == model
                  and (j.params or {}).get("image_ids") is None for j in list_jobs(cat, limit=50, kind="embed"))
    if waiting:
        return None
    request = EmbedRequest(backbone=model, user=user, reason="import",
                           image_ids=None if image_ids is None else tuple(image_ids))
    return submit(cat, "embed", request.to_dict())
