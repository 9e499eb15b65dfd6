"""The exports: the catalogue as CSVs and per-individual sheets (the Catalogue tab's export button,
``rosette export-catalogue``), a Camtrap DP package written by a background job for the Export tab (the shell
writes it in the foreground: ``jobs.actions.camtrapdp``), and a Kaggle submission. From the browser the uploaded
test.csv and images are staged under ``<data_dir>/exports/<stamp>/`` and the export runs as a background job whose
submission file is handed back when it is done; ``rosette export-kaggle`` runs it in the foreground."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from core.io.kaggle import check_images_exist, distinct_images, read_test_csv
from core.readers import IngestError, ReadError, ZipTree
from db.io import catalogue_export
from db.identify import export as kaggle
from db.catalogue import CatalogueError
from db.models import JobStatus
from db.session import Catalogue
from db.species import active_model_name
from jobs import queue
from jobs.actions.camtrapdp import CamtrapDPExported
from jobs.actions.common import curator_name
from jobs.requests.camtrapdp import ExportCamtrapDPRequest
from jobs.requests.export import ExportCatalogueRequest, KaggleExportRequest, KaggleUploadRequest

# --------------------------------------------------------------------------- the catalogue


@dataclass(frozen=True)
class CatalogueExported:
    path: str
    summary: str  # what it holds, e.g. "Exported 2 individuals, ... to catalogue-....zip"

    @property
    def message(self) -> str:
        return self.summary + "."


def export_catalogue(cat: Catalogue, request: ExportCatalogueRequest) -> CatalogueExported:
    """The catalogue as a zip of CSVs and per-individual sheets, at ``request.out`` or under the data folder's
    exports."""
    user = curator_name(request.user)
    if request.out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        out = cat.data_dir / "exports" / f"catalogue-{stamp}.zip"
    else:
        out = request.out
    done = catalogue_export.export_catalogue(cat, out, user=user, include_inactive=request.include_inactive,
                                             people=request.people)
    return CatalogueExported(path=str(done.path), summary=done.summary)


# --------------------------------------------------------------------------- Camtrap DP, in the background

#: The job kind of a Camtrap DP export run in the background (jobs.kinds).
CAMTRAP_DP_JOB = "camtrap_dp_export"


def queue_camtrap_dp_export(cat: Catalogue, request: ExportCamtrapDPRequest) -> tuple[int, str]:
    """Queue the export as a background job (the Export tab); returns (job id, what the tab says). The request is
    checked now (a bad one is refused before anything is queued); the job writes its package under the data
    folder's exports when ``request.out`` is None."""
    job_id = queue.submit(cat, CAMTRAP_DP_JOB, replace(request, user=curator_name(request.user)).to_dict())
    return job_id, (f"Camtrap DP export queued as job #{job_id} (people: {request.people}). Its progress is shown "
                    "here and in the Jobs tab.")


def latest_camtrap_dp_job(cat: Catalogue) -> int | None:
    """The newest Camtrap DP export job, so a reloaded page shows its state and download again."""
    jobs = queue.list_jobs(cat, limit=1, kind=CAMTRAP_DP_JOB)
    return jobs[0].id if jobs else None


def camtrap_dp_export_status(cat: Catalogue, job_id: int | None) -> tuple[CamtrapDPExported | None, str]:
    """(the finished export, or None while it runs or when it failed; what the curator reads meanwhile)."""
    if not job_id:
        return None, ""
    job = queue.get_job(cat, int(job_id))
    if job.status == JobStatus.succeeded:
        r = dict(job.result or {})
        return CamtrapDPExported(path=str(r.get("path")), zip_path=r.get("zip"), valid=bool(r.get("valid")),
                                 details=r), ""
    if job.status in (JobStatus.failed, JobStatus.cancelled):  # the message says which, and why
        return None, f"Camtrap DP export job #{job.id}: {job.message}"
    return None, f"Camtrap DP export job #{job.id} {job.status.value}: {job.progress:.0%} {job.message or ''}".rstrip()


# --------------------------------------------------------------------------- Kaggle


def export_dir(cat: Catalogue) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    d = cat.data_dir / "exports" / stamp
    d.mkdir(parents=True)
    return d


MAX_EXPORT_BYTES = 4 * 1024 ** 3  # total unpacked size of an uploaded images zip


def _safe_extract(zip_path: Path, target: Path, *, max_total: int | None = None,
                  wanted: set[str] | None = None) -> int:
    """Unpack a zip's image files into ``target`` (flat) with the same hardened reader as ingest (no ``..``,
    absolute paths, links or encrypted members; each file at most ingest's size limit, read with a hard cap so
    a zip bomb stops early) and a cap on the total; refused members are reported, nothing outside ``target``.
    With ``wanted`` (file names), only those members are read: the rest of the zip is never unpacked."""
    max_total = MAX_EXPORT_BYTES if max_total is None else max_total

    try:
        tree = ZipTree(zip_path, label="the images zip")
    except IngestError as exc:
        raise CatalogueError(str(exc)) from None
    try:
        if tree.problems:
            first = tree.problems[0]
            raise CatalogueError(f"the images zip holds a member that was refused: {first.name}: {first.message}")
        total, n = 0, 0
        for rel in tree.files():
            if wanted is not None and PurePosixPath(rel).name not in wanted:
                continue
            try:
                data = tree.read(rel)
            except ReadError as exc:
                raise CatalogueError(f"the images zip's {rel}: {exc}") from None
            total += len(data)
            if total > max_total:
                raise CatalogueError(f"the images zip unpacks to more than {max_total // 1024 ** 2:,} MB; refused "
                                     "(upload the images the test.csv names, or use a folder in the data directory)")
            (target / PurePosixPath(rel).name).write_bytes(data)
            n += 1
        return n
    finally:
        tree.close()


def allowed_image_folder(cat: Catalogue, folder: str) -> Path:
    """A server folder the Export tab may read: inside the data directory only (uploads are staged there), so
    the browser can neither read nor probe the rest of the machine."""
    root = cat.data_dir.resolve()
    p = Path(folder.strip()).expanduser()
    p = (root / p).resolve() if not p.is_absolute() else p.resolve()
    if p != root and root not in p.parents:
        raise CatalogueError(f"Only folders inside the data directory ({root}) can be used here; upload the images "
                             "as a zip, or put them under the data directory.")
    if not p.is_dir():
        raise CatalogueError(f"There is no folder {folder.strip()!r} inside the data directory.")
    return p


def submit_kaggle_export(cat: Catalogue, request: KaggleUploadRequest) -> tuple[int, str]:
    """Validate the inputs, stage them, queue an ``export`` job; returns (job id, message)."""
    if not request.test_csv:
        raise CatalogueError("Upload the competition's test.csv (row_id,query_image,gallery_image).")
    if not request.images_zip and not (request.images_dir or "").strip():
        raise CatalogueError("Upload the images as a zip, or give the folder on this machine that holds them.")
    uploaded = Path(request.test_csv)
    # refuses malformed files with line numbers, naming the file as the curator knows it (not the server's
    # temporary upload folder)
    rows = read_test_csv(uploaded, label=request.test_csv_name or uploaded.name)
    folder = None if request.images_zip else allowed_image_folder(cat, request.images_dir or "")
    out_dir = export_dir(cat)
    try:
        shutil.copy(request.test_csv, out_dir / "test.csv")
        if request.images_zip:
            (out_dir / "images").mkdir()
            _safe_extract(Path(request.images_zip), out_dir / "images", wanted=set(distinct_images(rows)))
            folder = out_dir / "images"
        check_images_exist(distinct_images(rows), folder)
    except BaseException:
        shutil.rmtree(out_dir, ignore_errors=True)  # a failed staging leaves nothing behind
        raise
    job = KaggleExportRequest(test_csv=str(out_dir / "test.csv"), images_dir=str(folder), model=request.model,
                              variant=request.variant, out=str(out_dir / "submission.csv"),
                              staged_images=bool(request.images_zip), user=request.user)
    job_id = queue.submit(cat, "export", job.to_dict())
    return job_id, (f"Export queued as job #{job_id}: {len(rows):,} pairs over {len(distinct_images(rows)):,} images "
                    f"with {request.model} ({request.variant}). Progress is shown here and in the Jobs tab.")


def export_kaggle(cat: Catalogue, request: KaggleExportRequest, *, progress: Callable[[int, int], None] | None = None,
                  should_cancel: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Write the submission now (``rosette export-kaggle``; the ``export`` job does the same in the background):
    embed each image test.csv names once, score every row. Returns what was written (``summary`` in words)."""
    return kaggle.export_kaggle(cat, test_csv=request.test_csv, images_dir=request.images_dir,
                                model=request.model or active_model_name(cat), out=request.out,
                                variant=request.variant, progress=progress, should_cancel=should_cancel)


def latest_export_job(cat: Catalogue) -> int | None:
    """The newest export job, so a reloaded page shows its state and download again."""
    jobs = queue.list_jobs(cat, limit=1, kind="export")
    return jobs[0].id if jobs else None


def export_status(cat: Catalogue, job_id: int | None) -> tuple[str, str | None]:
    """(what the curator reads, path of the finished submission or None)."""
    if not job_id:
        return "", None
    job = queue.get_job(cat, int(job_id))
    if job.status == JobStatus.succeeded:
        r = job.result or {}
        return (f"Done: {r.get('rows', 0):,} rows written by {r.get('model')} ({r.get('variant')}, scores: "
                f"{'cosine' if r.get('metric') == 'cosine' else 'exp(-distance)'}) in {r.get('seconds_total', 0):.1f} s.",
                r.get("out"))
    if job.status in (JobStatus.failed, JobStatus.cancelled):
        return f"Job #{job.id} {job.status.value}: {job.message}", None
    return f"Job #{job.id} {job.status.value}: {job.progress:.0%} {job.message or ''}", None
