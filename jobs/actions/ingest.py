"""Imports: uploaded photos and zips (the Ingest tab) and a path on this machine (``rosette import``), and the
background job that computes the new photos' match-review features ahead."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from core.readers import FORMATS, IngestReport
from db.ingest import ingest_path, ingest_uploads
from db.models import JobStatus
from db.session import Catalogue
from db.species import active_model_name
from jobs.actions.common import curator_name
from jobs.queue import list_jobs, submit
from jobs.requests.ingest import ImportPathRequest, ImportUploadsRequest

__all__ = ["FORMATS", "IMPORT_STOPS", "REPORT_HEADERS", "ImportOutcome", "StopRequests", "import_path",
           "import_uploads", "warm_features"]

REPORT_HEADERS = ["File", "Result", "Details"]

Progress = Callable[[int, int], None]


@dataclass
class ImportOutcome:
    rows: list[list[str]]  # under REPORT_HEADERS
    counts: dict[str, int]
    features_job: int | None = None  # the background job computing match-review features of the new photos

    @property
    def summary(self) -> str:
        shown = [f"{n} {status if status != 'error' else ('errors' if n != 1 else 'error')}"
                 for status, n in self.counts.items() if n]
        text = " · ".join(shown) if shown else "nothing to import"
        if self.features_job is not None:
            text += f" · their features for match review are being computed in the background (job #{self.features_job})"
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
    report = ingest_uploads(cat, list(request.paths), manifest=request.manifest, user=user, progress=progress,
                            should_cancel=should_cancel, update_metadata=request.update_metadata,
                            detections=request.detections, min_confidence=request.min_confidence,
                            keep_empty=request.keep_empty)
    warm = warm_features(cat, user=user) if report.counts.get("imported") else None
    return ImportOutcome(rows=[[str(c) for c in row] for row in report.rows()], counts=dict(report.counts),
                         features_job=warm)


def import_path(cat: Catalogue, request: ImportPathRequest, *, progress: Progress | None = None) -> IngestReport:
    """Import a photo, folder, zip, manifest or Kaggle layout on this machine; the report of every file."""
    return ingest_path(cat, request.path, format=request.format, user=curator_name(request.user),
                       dry_run=request.dry_run, progress=progress, update_metadata=request.update_metadata,
                       detections=request.detections, min_confidence=request.min_confidence,
                       keep_empty=request.keep_empty, detector=request.detector, event_gap_s=request.event_gap_s,
                       layout=request.layout)


def warm_features(cat: Catalogue, *, user: str) -> int | None:
    """Queue the active model's features of every photo in the background (the ``embed`` job), so the first
    Match review opening after an import finds them instead of computing them while the curator waits. Returns
    the job id, or None when such a job is already waiting (it will include the new photos)."""
    model = active_model_name(cat)
    waiting = any(j.status == JobStatus.queued and (j.params or {}).get("backbone") == model
                  for j in list_jobs(cat, limit=50, kind="embed"))
    return None if waiting else submit(cat, "embed", {"backbone": model, "user": user})
