"""Kaggle export from the browser: stage the uploaded test.csv and images under
``<data_dir>/exports/<stamp>/``, run the export as a background job, hand back the
submission file when it is done."""

from __future__ import annotations

import shutil
import zipfile
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from app.services import upload_path
from db.catalogue import CatalogueError
from db.models import JobStatus
from db.session import Catalogue
from jobs import queue


def export_dir(cat: Catalogue) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    d = cat.data_dir / "exports" / stamp
    d.mkdir(parents=True)
    return d


def _safe_extract(zip_path: Path, target: Path) -> int:
    """Extract image members of a zip into ``target`` (flat), refusing absolute or ``..`` paths."""
    n = 0
    with zipfile.ZipFile(zip_path) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            p = PurePosixPath(info.filename)
            if p.is_absolute() or ".." in p.parts:
                raise CatalogueError(f"the zip member {info.filename!r} points outside the archive; refused")
            with zf.open(info) as src, open(target / p.name, "wb") as dst:
                shutil.copyfileobj(src, dst)
            n += 1
    return n


def submit_kaggle_export(cat: Catalogue, *, test_csv: object | None, images_zip: object | None,
                         images_dir: str | None, model: str, variant: str = "full_rgb",
                         user: str = "curator") -> tuple[int, str]:
    """Validate the inputs, stage them, queue an ``export`` job; returns (job id, message)."""
    from core.kaggle import check_images_exist, distinct_images, read_test_csv

    if not test_csv:
        raise CatalogueError("Upload the competition's test.csv (row_id,query_image,gallery_image).")
    if not images_zip and not (images_dir or "").strip():
        raise CatalogueError("Upload the images as a zip, or give the folder on this machine that holds them.")
    rows = read_test_csv(Path(upload_path(test_csv)))  # refuses malformed files with line numbers
    out_dir = export_dir(cat)
    shutil.copy(upload_path(test_csv), out_dir / "test.csv")
    if images_zip:
        (out_dir / "images").mkdir()
        _safe_extract(Path(upload_path(images_zip)), out_dir / "images")
        folder = out_dir / "images"
    else:
        folder = Path(images_dir.strip()).expanduser()
        if not folder.is_dir():
            raise CatalogueError(f"There is no folder {str(folder)!r} on this machine.")
    check_images_exist(distinct_images(rows), folder)
    job_id = queue.submit(cat, "export", {"test_csv": str(out_dir / "test.csv"), "images_dir": str(folder),
                                          "model": model, "variant": variant, "out": str(out_dir / "submission.csv"),
                                          "user": user})
    return job_id, (f"Export queued as job #{job_id}: {len(rows):,} pairs over {len(distinct_images(rows)):,} images "
                    f"with {model} ({variant}). Progress is shown here and in the Jobs tab.")


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
