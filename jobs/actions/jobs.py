"""The job list: rows with their buttons, cancel, retry, queue the features of every photo. The Jobs tab and
``rosette jobs`` call these; the actions take a request of ``jobs.requests.jobs``."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from db.catalogue import CatalogueError
from db.models import Job, JobStatus, utcnow
from db.session import Catalogue
from jobs import queue
from jobs.actions.common import curator_name
from jobs.actions.match import utc_text
from jobs.queue import InvalidTransition
from jobs.requests.jobs import CancelJobRequest, RetryJobRequest, WarmFeaturesRequest  # noqa: F401


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
    ran_on: str = ""  # where it ran: "local (host)" or "Ray (address)"; empty while queued


def ran_on_words(worker: str | None) -> str:
    """Where a job ran, from its ``worker`` column: ``ray:<address>`` (a Ray cluster) or ``<host>:<pid>``."""
    if not worker:
        return ""
    if worker.startswith("ray:"):
        return f"Ray ({worker[len('ray:'):] or 'local cluster'})"
    return f"local ({worker.rsplit(':', 1)[0]})"


@dataclass
class JobOutcome:
    job_id: int
    status: str  # the job's status after the action
    message: str


def _duration(job: Job) -> str:
    if job.started_at is None:
        return ""
    end = job.finished_at or utcnow()
    secs = max(0, int((end - job.started_at).total_seconds()))
    return f"{secs // 60} min {secs % 60:02d} s" if secs >= 60 else f"{secs} s"


def list_jobs(cat: Catalogue, *, limit: int = 50, kind: str | None = None) -> list[Job]:
    """The newest jobs (of one kind), newest first."""
    return queue.list_jobs(cat, limit=limit, kind=kind)


def get_job(cat: Catalogue, job_id: int) -> Job:
    """One job (an unknown id raises with a message)."""
    return queue.get_job(cat, int(job_id))


def job_over(cat: Catalogue, job_id: int) -> bool:
    """Whether the job has ended (succeeded, failed or cancelled): a poll of it can stop."""
    return get_job(cat, job_id).status in queue.TERMINAL


def job_rows(cat: Catalogue, *, limit: int = 50) -> list[JobRow]:
    """The newest jobs with what the Jobs tab shows and which buttons apply."""
    out = []
    for job in queue.list_jobs(cat, limit=limit):
        status = job.status.value
        if job.status == JobStatus.running and job.cancel_requested:
            status = "cancelling"
        params = ", ".join(f"{k}={v}" for k, v in (job.params or {}).items() if k != "user")
        out.append(JobRow(id=job.id, kind=job.kind, status=status, progress=float(job.progress or 0.0),
                          message=job.message or "", params=params, created=utc_text(job.created_at),
                          duration=_duration(job),
                          can_cancel=job.status in (JobStatus.queued, JobStatus.running) and not job.cancel_requested,
                          can_retry=job.status in (JobStatus.failed, JobStatus.cancelled),
                          error=(job.error or "").strip().splitlines()[-1] if job.error else None,
                          waited_s=(utcnow() - job.created_at).total_seconds()
                          if job.status == JobStatus.queued and job.created_at else None,
                          ran_on=ran_on_words(job.worker)))
    return out


def oldest_queued_wait_s(rows: Sequence[JobRow]) -> float | None:
    """Seconds the longest-waiting queued job has waited, or None when nothing waits."""
    waits = [r.waited_s for r in rows if r.status == "queued" and r.waited_s is not None]
    return max(waits) if waits else None


def cancel_job(cat: Catalogue, request: CancelJobRequest) -> JobOutcome:
    """Cancel a queued job at once; ask a running one to stop at its next step."""
    job_id = request.job_id
    status = queue.request_cancel(cat, job_id, by=curator_name(request.user))
    if status == JobStatus.cancelled:
        message = f"Job #{job_id} cancelled."
    elif status == JobStatus.running:
        message = f"Job #{job_id} will stop at its next step."
    else:
        message = f"Job #{job_id} has already finished ({status.value})."
    return JobOutcome(job_id, status.value, message)


def retry_job(cat: Catalogue, request: RetryJobRequest) -> JobOutcome:
    """Queue a failed or cancelled job again (a training run resumes from its last checkpoint)."""
    curator_name(request.user)
    try:
        queue.retry(cat, request.job_id)
    except InvalidTransition as exc:
        raise CatalogueError(f"Job #{request.job_id} cannot be run again: {exc}.") from None
    return JobOutcome(request.job_id, JobStatus.queued.value, f"Job #{request.job_id} queued again.")


def recover_stale_jobs(cat: Catalogue) -> list[int]:
    """Jobs whose worker died, put back in the queue or failed (``rosette jobs recover``)."""
    return queue.recover_stale_jobs(cat)


def warm_feature_cache(cat: Catalogue, request: WarmFeaturesRequest) -> str:
    """Queue an ``embed`` job so match review does not compute features while the curator waits."""
    curator_name(request.user)
    job_id = queue.submit(cat, "embed", {"backbone": request.backbone})
    return f"Job #{job_id} queued: computing {request.backbone} features for every photo."


def worker_running() -> bool:
    """Whether a job worker thread runs in this process (jobs only progress when one runs somewhere)."""
    return any(t.name.startswith("rosette-worker") and t.is_alive() for t in threading.enumerate())
