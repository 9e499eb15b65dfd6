"""Persisted job queue: submit, claim, progress, heartbeat, cancel, finish.

Status lives in the ``jobs`` table; the allowed transitions are in one place
(:data:`TRANSITIONS`). A job handler receives a :class:`JobContext` to report
progress (which also beats the heartbeat) and to ask whether the curator
cancelled it. ``run_job`` runs one job synchronously (tests, CLI); the worker
(``jobs.worker``) claims queued jobs one at a time. A running job whose
heartbeat is older than :data:`STALE_AFTER_S` belongs to a worker that died;
``recover_stale_jobs`` fails it with a clear message (or requeues it once).
"""

from __future__ import annotations

import os
import socket
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from db.models import Job, JobStatus, utcnow
from db.session import Catalogue

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.queued: frozenset({JobStatus.running, JobStatus.cancelled}),
    JobStatus.running: frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.queued}),
    JobStatus.succeeded: frozenset(),
    JobStatus.failed: frozenset({JobStatus.queued}),  # retry
    JobStatus.cancelled: frozenset({JobStatus.queued}),  # retry
}
TERMINAL = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})
STALE_AFTER_S = 120.0
HEARTBEAT_EVERY_S = 5.0


class JobError(RuntimeError):
    pass


class InvalidTransition(JobError):
    pass


class JobCancelled(Exception):
    """Raised inside a handler (via ``ctx.check_cancelled()``) to stop a job the curator cancelled."""


JobHandler = Callable[[Catalogue, dict[str, Any], "JobContext"], dict[str, Any] | None]
_HANDLERS: dict[str, JobHandler] = {}


def register_job_kind(kind: str) -> Callable[[JobHandler], JobHandler]:
    def decorator(fn: JobHandler) -> JobHandler:
        if kind in _HANDLERS:
            raise ValueError(f"job kind {kind!r} is already registered")
        _HANDLERS[kind] = fn
        return fn

    return decorator


def list_job_kinds() -> list[str]:
    _load_kinds()
    return sorted(_HANDLERS)


def _load_kinds() -> None:
    import jobs.kinds  # noqa: F401  (registers the built-in kinds)


def get_handler(kind: str) -> JobHandler:
    _load_kinds()
    try:
        return _HANDLERS[kind]
    except KeyError:
        raise JobError(f"unknown job kind {kind!r}; available: {', '.join(sorted(_HANDLERS))}") from None


def check_transition(old: JobStatus, new: JobStatus) -> None:
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(f"a {old.value} job cannot become {new.value}")


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def submit(cat: Catalogue, kind: str, params: dict[str, Any] | None = None) -> int:
    """Queue a job; returns its id."""
    get_handler(kind)
    with cat.unit_of_work() as s:
        job = Job(kind=kind, params=dict(params or {}), status=JobStatus.queued, message="waiting for a worker")
        s.add(job)
        s.commit()
        return job.id


def get_job(cat: Catalogue, job_id: int) -> Job:
    with cat.unit_of_work() as s:
        job = s.get(Job, job_id)
        if job is None:
            raise JobError(f"no job {job_id}")
        return job


def list_jobs(cat: Catalogue, *, limit: int = 50) -> list[Job]:
    with cat.unit_of_work() as s:
        return list(s.scalars(select(Job).order_by(Job.id.desc()).limit(limit)))


def _set_status(cat: Catalogue, job_id: int, new: JobStatus, **fields: Any) -> bool:
    """Compare-and-set the status; returns False if another actor changed it first."""
    with cat.unit_of_work() as s:
        job = s.get(Job, job_id)
        if job is None:
            raise JobError(f"no job {job_id}")
        old = job.status
        check_transition(old, new)
        res = s.execute(update(Job).where(Job.id == job_id, Job.status == old).values(status=new, **fields))
        s.commit()
        return res.rowcount == 1


def request_cancel(cat: Catalogue, job_id: int) -> JobStatus:
    """Cancel a queued job at once; ask a running one to stop at its next check."""
    with cat.unit_of_work() as s:
        job = s.get(Job, job_id)
        if job is None:
            raise JobError(f"no job {job_id}")
        if job.status == JobStatus.queued:
            res = s.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.queued).values(
                status=JobStatus.cancelled, cancel_requested=True, finished_at=utcnow(), message="cancelled before it started"))
            s.commit()
            if res.rowcount == 1:
                return JobStatus.cancelled
            return request_cancel(cat, job_id)
        if job.status == JobStatus.running:
            job.cancel_requested = True
            job.message = "cancelling..."
            s.commit()
        return job.status


def retry(cat: Catalogue, job_id: int) -> None:
    _set_status(cat, job_id, JobStatus.queued, cancel_requested=False, error=None, progress=0.0,
                message="queued again", started_at=None, finished_at=None, worker=None)


@dataclass
class JobContext:
    """Handed to a running handler: progress reporting and cancellation."""

    cat: Catalogue
    job_id: int
    _last_beat: float = 0.0

    def progress(self, fraction: float, message: str | None = None) -> None:
        import time

        now = time.monotonic()
        fields: dict[str, Any] = {"progress": max(0.0, min(1.0, float(fraction))), "heartbeat_at": utcnow()}
        if message is not None:
            fields["message"] = message
        with self.cat.unit_of_work() as s:
            s.execute(update(Job).where(Job.id == self.job_id).values(**fields))
            s.commit()
        self._last_beat = now

    def cancelled(self) -> bool:
        with self.cat.unit_of_work() as s:
            return bool(s.scalar(select(Job.cancel_requested).where(Job.id == self.job_id)))

    def check_cancelled(self) -> None:
        if self.cancelled():
            raise JobCancelled()

    def callback(self, *, start: float = 0.0, end: float = 1.0, label: str = "") -> Callable[[int, int], None]:
        """A ``progress(done, total)`` callback for core pipelines, mapped onto [start, end]."""

        def report(done: int, total: int) -> None:
            frac = start + (end - start) * (done / total if total else 1.0)
            self.progress(frac, f"{label} {done}/{total}".strip())

        return report


def claim_next(cat: Catalogue, *, worker: str | None = None) -> int | None:
    """Atomically move the oldest queued job to running; returns its id or None."""
    worker = worker or worker_name()
    while True:
        with cat.unit_of_work() as s:
            job_id = s.scalar(select(Job.id).where(Job.status == JobStatus.queued).order_by(Job.id).limit(1))
            if job_id is None:
                return None
            now = utcnow()
            res = s.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.queued).values(
                status=JobStatus.running, started_at=now, heartbeat_at=now, worker=worker, message="started"))
            s.commit()
            if res.rowcount == 1:
                return job_id


def execute(cat: Catalogue, job_id: int) -> JobStatus:
    """Run a job already in ``running`` and record its outcome."""
    job = get_job(cat, job_id)
    ctx = JobContext(cat, job_id)
    try:
        handler = get_handler(job.kind)
        result = handler(cat, dict(job.params), ctx) or {}
    except JobCancelled:
        _set_status(cat, job_id, JobStatus.cancelled, finished_at=utcnow(), message="cancelled by the curator")
        return JobStatus.cancelled
    except Exception as exc:  # the job failed; the worker lives on
        if ctx.cancelled():  # a pipeline stopped on the cancel request with its own exception
            _set_status(cat, job_id, JobStatus.cancelled, finished_at=utcnow(), message="cancelled by the curator")
            return JobStatus.cancelled
        _set_status(cat, job_id, JobStatus.failed, finished_at=utcnow(),
                    message=f"failed: {exc}", error="".join(traceback.format_exception(exc))[-20000:])
        return JobStatus.failed
    _set_status(cat, job_id, JobStatus.succeeded, finished_at=utcnow(), progress=1.0, result=result,
                message=str(result.get("summary", "done")) if isinstance(result, dict) else "done")
    return JobStatus.succeeded


def run_job(cat: Catalogue, job_id: int) -> JobStatus:
    """Synchronous mode: claim this specific queued job and run it in this process."""
    if not _set_status(cat, job_id, JobStatus.running, started_at=utcnow(), heartbeat_at=utcnow(),
                       worker=worker_name(), message="started"):
        raise JobError(f"job {job_id} was taken by another worker")
    return execute(cat, job_id)


def submit_and_run(cat: Catalogue, kind: str, params: dict[str, Any] | None = None) -> Job:
    """Submit and run synchronously; returns the finished job row."""
    job_id = submit(cat, kind, params)
    run_job(cat, job_id)
    return get_job(cat, job_id)


def recover_stale_jobs(cat: Catalogue, *, stale_after_s: float = STALE_AFTER_S, requeue: bool = False,
                       now: datetime | None = None) -> list[int]:
    """Running jobs with no heartbeat for ``stale_after_s``: their worker died. Fail (or requeue) them."""
    cutoff = (now or utcnow()) - timedelta(seconds=stale_after_s)
    recovered = []
    with cat.unit_of_work() as s:
        stale = list(s.scalars(select(Job).where(Job.status == JobStatus.running, Job.heartbeat_at < cutoff)))
        for job in stale:
            new = JobStatus.queued if requeue else JobStatus.failed
            msg = (f"the worker {job.worker} stopped (no heartbeat since {job.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC)"
                   + ("; queued again" if requeue else "; press retry to run it again"))
            res = s.execute(update(Job).where(Job.id == job.id, Job.status == JobStatus.running).values(
                status=new, message=msg, error=msg if not requeue else None,
                finished_at=None if requeue else utcnow(), worker=None))
            if res.rowcount == 1:
                recovered.append(job.id)
        s.commit()
    return recovered
