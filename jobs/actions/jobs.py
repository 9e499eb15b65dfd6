"""What the Jobs tab's job list calls: rows with their buttons, cancel, retry, warming the feature cache."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobs.actions.match import DEFAULT_MODEL, _utc  # noqa: F401
from db.catalogue import CatalogueError
from db.models import Job, JobStatus
from db.session import Catalogue

@dataclass
class JobRow:
    id: int
    kind: str
    status: str  # queued | running | cancelling | succeeded | failed | cancelled
    progress: float
    message: str
    params: str
    created: str
    duration: str
    can_cancel: bool
    can_retry: bool
    error: str | None
    waited_s: float | None = None  # for a queued job: seconds since it was queued


def _duration(job: Job) -> str:
    if job.started_at is None:
        return ""
    from db.models import utcnow

    end = job.finished_at or utcnow()
    secs = max(0, int((end - job.started_at).total_seconds()))
    return f"{secs // 60} min {secs % 60:02d} s" if secs >= 60 else f"{secs} s"


def job_rows(cat: Catalogue, *, limit: int = 50) -> list[JobRow]:
    """The newest jobs with what the Jobs tab shows and which buttons apply."""
    from db.models import utcnow
    from jobs.queue import list_jobs

    out = []
    for job in list_jobs(cat, limit=limit):
        status = job.status.value
        if job.status == JobStatus.running and job.cancel_requested:
            status = "cancelling"
        params = ", ".join(f"{k}={v}" for k, v in (job.params or {}).items() if k != "user")
        out.append(JobRow(id=job.id, kind=job.kind, status=status, progress=float(job.progress or 0.0),
                          message=job.message or "", params=params, created=_utc(job.created_at),
                          duration=_duration(job),
                          can_cancel=job.status in (JobStatus.queued, JobStatus.running) and not job.cancel_requested,
                          can_retry=job.status in (JobStatus.failed, JobStatus.cancelled),
                          error=(job.error or "").strip().splitlines()[-1] if job.error else None,
                          waited_s=(utcnow() - job.created_at).total_seconds()
                          if job.status == JobStatus.queued and job.created_at else None))
    return out


def oldest_queued_wait_s(rows: Sequence[JobRow]) -> float | None:
    """Seconds the longest-waiting queued job has waited, or None when nothing waits."""
    waits = [r.waited_s for r in rows if r.status == "queued" and r.waited_s is not None]
    return max(waits) if waits else None


def cancel_job(cat: Catalogue, job_id: int) -> str:
    from jobs.queue import request_cancel

    status = request_cancel(cat, int(job_id))
    if status == JobStatus.cancelled:
        return f"Job #{job_id} cancelled."
    if status == JobStatus.running:
        return f"Job #{job_id} will stop at its next step."
    return f"Job #{job_id} has already finished ({status.value})."


def retry_job(cat: Catalogue, job_id: int) -> str:
    from jobs.queue import InvalidTransition, retry

    try:
        retry(cat, int(job_id))
    except InvalidTransition as exc:
        raise CatalogueError(f"Job #{job_id} cannot be run again: {exc}.") from None
    return f"Job #{job_id} queued again."


def warm_feature_cache(cat: Catalogue, *, backbone: str = DEFAULT_MODEL) -> str:
    """Queue an ``embed`` job so match review does not compute features while the curator waits."""
    from jobs.queue import submit

    job_id = submit(cat, "embed", {"backbone": backbone})
    return f"Job #{job_id} queued: computing {backbone} features for every photo."


def worker_running() -> bool:
    """Whether a job worker thread runs in this process (jobs only progress when one runs somewhere)."""
    import threading

    return any(t.name.startswith("rosette-worker") and t.is_alive() for t in threading.enumerate())
