"""Persisted job queue: submit, claim, progress, heartbeat, cancel, finish.

Status lives in the ``jobs`` table. Every status change goes through one
checked compare-and-set, :func:`transition`, which refuses a move that
:data:`TRANSITIONS` does not allow and loses cleanly (returns False) when
another actor changed the row first. Nothing else writes ``status``.

Jobs belong to a queue: ``light`` (mask, embed, export, ...) or ``heavy``
(train, evaluate, diagnose); the worker runs one job per queue at a time, so a
one-hour training run never holds up a mask job. A job handler receives a
:class:`JobContext` to report progress (which beats the heartbeat: a heartbeat
proves progress, not merely a live process), write its log and ``metrics.jsonl``
and keep checkpoints in its own folder ``<data_dir>/jobs/<id>/``, and to ask
whether the curator cancelled it.

``run_job`` runs one job synchronously in this process (tests, CLI);
``jobs.worker`` runs each job in a supervised child process. A running job
whose heartbeat is older than its hang limit is stopped by its supervisor; one
whose worker died is found by :func:`recover_stale_jobs` and queued again while
it has attempts left (``attempts`` < ``max_attempts``), else failed.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

import jobs.kinds  # noqa: F401  (registers the built-in job kinds; it imports the registry, never this module)
from db.audit import acting_as, acting_user, submitter_of_job
from db.models import Job, JobStatus, utcnow
from db.session import Catalogue

# the registry and the handler's context live in their own modules (jobs.kinds imports them, not this one);
# their names are re-exported here, where callers have always found them
from jobs.context import JobCancelled, JobContext, job_dir  # noqa: F401
from jobs.registry import (  # noqa: F401
    _HANDLERS,
    _KIND_QUEUE,
    _SUMMARIES,
    HEAVY,
    LIGHT,
    QUEUES,
    JobHandler,
    job_summary,
    load_extra_job_kinds,
    register_job_kind,
)

TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.queued: frozenset({JobStatus.running, JobStatus.cancelled}),
    # running -> queued: its worker died and it has attempts left
    JobStatus.running: frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.queued}),
    JobStatus.succeeded: frozenset(),
    JobStatus.failed: frozenset({JobStatus.queued}),  # retry
    JobStatus.cancelled: frozenset({JobStatus.queued}),  # retry
}
TERMINAL = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled})
STALE_AFTER_S = 600.0  # no progress for this long: the job is hung or its worker is gone
HEARTBEAT_EVERY_S = 5.0
DEFAULT_MAX_ATTEMPTS = 2


# a job queued in this process (the server's UI) wakes this process's idle workers at once (wait_for_queued)
# instead of at their next poll of the table; a job queued by another process is found by that poll
_queued = threading.Condition()
_queued_count = 0


def _announce_queued() -> None:
    global _queued_count
    with _queued:
        _queued_count += 1
        _queued.notify_all()


def queued_mark() -> int:
    """How many jobs this process has queued so far: read it before looking for work, hand it to
    :func:`wait_for_queued`, and a job queued in between is not missed."""
    return _queued_count


def wait_for_queued(mark: int, timeout: float) -> bool:
    """Block until this process queues a job after ``mark`` (:func:`queued_mark`) or ``timeout`` s pass; True
    when one was queued."""
    with _queued:
        return _queued.wait_for(lambda: _queued_count != mark, timeout)


class JobError(ValueError):
    """A job-level problem with a message for curators (no such job, a transition not allowed ...)."""


class InvalidTransition(JobError):
    pass


def list_job_kinds() -> list[str]:
    _load_kinds()
    return sorted(_HANDLERS)


def _load_kinds() -> None:
    """The built-in kinds register themselves when ``jobs.kinds`` is imported (at the top of this module); the
    modules named in ``$ROSETTE_JOB_KINDS`` are imported here."""
    load_extra_job_kinds()


def get_handler(kind: str) -> JobHandler:
    _load_kinds()
    try:
        return _HANDLERS[kind]
    except KeyError:
        raise JobError(f"unknown job kind {kind!r}; available: {', '.join(sorted(_HANDLERS))}") from None


def queue_of(kind: str) -> str:
    get_handler(kind)
    return _KIND_QUEUE[kind]


def check_transition(old: JobStatus, new: JobStatus) -> None:
    if new not in TRANSITIONS[old]:
        raise InvalidTransition(f"a {old.value} job cannot become {new.value}")


def transition(cat: Catalogue, job_id: int, new: JobStatus, *, expect: Iterable[JobStatus] | None = None,
               **fields: Any) -> bool:
    """The one compare-and-set of a job's status.

    Reads the current status ``old``; raises :class:`InvalidTransition` when
    ``old -> new`` is not in :data:`TRANSITIONS` or ``old`` is not in ``expect``;
    otherwise ``UPDATE ... WHERE id = :id AND status = :old`` and returns whether
    this call won (False: another actor changed the row in between).
    """
    with cat.unit_of_work() as s:
        old = s.scalar(select(Job.status).where(Job.id == job_id))
        if old is None:
            raise JobError(f"no job {job_id}")
        if expect is not None and old not in set(expect):
            raise InvalidTransition(f"job {job_id} is {old.value}; expected "
                                    f"{' or '.join(sorted(e.value for e in expect))}")
        check_transition(old, new)
        res = s.execute(update(Job).where(Job.id == job_id, Job.status == old).values(status=new, **fields))
        s.commit()
    won = res.rowcount == 1
    if won and new == JobStatus.queued:  # a retry, or a crashed job's next attempt
        _announce_queued()
    return won


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def submit(cat: Catalogue, kind: str, params: dict[str, Any] | None = None, *,
           max_attempts: int = DEFAULT_MAX_ATTEMPTS) -> int:
    """Queue a job on its kind's queue; returns its id."""
    q = queue_of(kind)
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    with cat.unit_of_work() as s:
        job = Job(kind=kind, queue=q, params=dict(params or {}), status=JobStatus.queued,
                  message="waiting for a worker", max_attempts=int(max_attempts), attempts=0)
        s.add(job)
        s.commit()
        job_id = job.id
    _announce_queued()
    return job_id


def get_job(cat: Catalogue, job_id: int) -> Job:
    with cat.unit_of_work() as s:
        job = s.get(Job, job_id)
        if job is None:
            raise JobError(f"no job {job_id}")
        return job


def list_jobs(cat: Catalogue, *, limit: int = 50, kind: str | None = None) -> list[Job]:
    with cat.unit_of_work() as s:
        q = select(Job).order_by(Job.id.desc()).limit(limit)
        if kind:
            q = q.where(Job.kind == kind)
        return list(s.scalars(q))


def cancelled_message(job: Job, *, extra: str = "") -> str:
    """"cancelled by <who asked>" (the person recorded with the request)."""
    return f"cancelled by {job.cancelled_by or 'request'}{extra}"


def request_cancel(cat: Catalogue, job_id: int, *, by: str | None = None) -> JobStatus:
    """Cancel a queued job at once; ask a running one to stop (its supervisor terminates it after a grace
    period if it does not stop by itself). ``by`` (default: the acting user) is recorded and named in the
    job's message. Returns the status after the call."""
    by = (by or acting_user())[:120]
    for _ in range(5):
        job = get_job(cat, job_id)
        if job.status == JobStatus.queued:
            if transition(cat, job_id, JobStatus.cancelled, expect={JobStatus.queued}, cancel_requested=True,
                          cancelled_by=by, finished_at=utcnow(), message=f"cancelled by {by} before it started"):
                return JobStatus.cancelled
            continue  # a worker claimed it meanwhile: ask the running job instead
        if job.status == JobStatus.running:
            with cat.unit_of_work() as s:
                s.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.running)
                          .values(cancel_requested=True, cancelled_by=by, message=f"cancelling (asked by {by})..."))
                s.commit()
        return get_job(cat, job_id).status
    return get_job(cat, job_id).status


def retry(cat: Catalogue, job_id: int) -> None:
    """Queue a failed or cancelled job again (a training job resumes from its last checkpoint).

    A running, queued or succeeded job is refused: two workers must never run one job.
    """
    job = get_job(cat, job_id)
    if job.status not in (JobStatus.failed, JobStatus.cancelled):
        raise InvalidTransition(f"job {job_id} is {job.status.value}; only a failed or cancelled job can be retried"
                                + (" (cancel it first)" if job.status == JobStatus.running else ""))
    if not transition(cat, job_id, JobStatus.queued, expect={JobStatus.failed, JobStatus.cancelled},
                      cancel_requested=False, error=None, progress=0.0, message="queued again", started_at=None,
                      finished_at=None, worker=None, pid=None, max_attempts=max(job.max_attempts, job.attempts + 1)):
        raise JobError(f"job {job_id} changed while it was being retried; look again")


def read_metrics(cat: Catalogue, job_id: int) -> list[dict[str, Any]]:
    """The rows of a job's ``metrics.jsonl`` (a half-written last line is skipped)."""
    path = cat.data_dir / "jobs" / str(int(job_id)) / "metrics.jsonl"
    rows: list[dict[str, Any]] = []
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def read_log_tail(cat: Catalogue, job_id: int, *, max_chars: int = 4000) -> str:
    path = cat.data_dir / "jobs" / str(int(job_id)) / "log.txt"
    if not path.exists():
        return ""
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        fh.seek(max(0, size - max_chars))
        return fh.read().decode("utf-8", errors="replace")


def claim_next(cat: Catalogue, *, worker: str | None = None, queue: str | None = None) -> int | None:
    """Atomically move the oldest queued job (of ``queue``, or any) to running; returns its id or None."""
    worker = worker or worker_name()
    while True:
        with cat.unit_of_work() as s:
            q = select(Job.id).where(Job.status == JobStatus.queued).order_by(Job.id).limit(1)
            if queue is not None:
                q = q.where(Job.queue == queue)
            job_id = s.scalar(q)
        if job_id is None:
            return None
        now = utcnow()
        try:
            won = transition(cat, job_id, JobStatus.running, expect={JobStatus.queued}, started_at=now,
                             heartbeat_at=now, worker=worker, message="started", attempts=Job.attempts + 1,
                             finished_at=None)
        except InvalidTransition:
            won = False  # cancelled or claimed between the select and the update
        if won:
            return job_id


def _finish(cat: Catalogue, job_id: int, new: JobStatus, **fields: Any) -> bool:
    """running -> new; False when the job is no longer running (its supervisor or a recovery got there first)."""
    try:
        return transition(cat, job_id, new, expect={JobStatus.running}, finished_at=utcnow(), **fields)
    except InvalidTransition:
        return False


def requeue_or_fail(cat: Catalogue, job_id: int, why: str, *, detail: str = "", again: bool = True) -> None:
    """A running job whose work ended without recording an outcome (a killed process, a lost Ray worker): queued
    again while attempts remain (and ``again``), else failed with ``why`` and ``detail`` (a log tail)."""
    job = get_job(cat, job_id)
    if job.status != JobStatus.running:
        return
    again = again and job.attempts < job.max_attempts
    msg = f"{why} (attempt {job.attempts} of {job.max_attempts})" + ("; queued again" if again else "")
    if again:
        transition(cat, job_id, JobStatus.queued, expect={JobStatus.running}, message=msg, worker=None, pid=None)
    else:
        _finish(cat, job_id, JobStatus.failed, message=f"failed: {msg}", error=f"{msg}\n{detail}"[-20000:])


@dataclass
class JobWatch:
    """A supervisor's view of the job it runs, polled while the work goes on (a child process, a Ray task)."""

    cat: Catalogue
    job_id: int
    cancel_grace_s: float
    hang_after_s: float
    cancel_seen: float | None = None
    job: Job | None = None  # as of the last poll

    def poll(self) -> str:
        """``wait`` (keep watching), ``recorded`` (the outcome was recorded meanwhile, by the work or a recovery),
        ``cancel`` (a cancel request's grace ran out) or ``hung`` (no heartbeat for ``hang_after_s``)."""
        try:
            self.job = job = get_job(self.cat, self.job_id)
        except Exception:  # noqa: BLE001 - the database is busy for a moment: look again next time
            return "wait"
        if job.status != JobStatus.running:
            return "recorded"
        if job.cancel_requested:
            self.cancel_seen = self.cancel_seen or time.monotonic()
            if time.monotonic() - self.cancel_seen > self.cancel_grace_s:
                return "cancel"
        beat = job.heartbeat_at or job.started_at
        if beat is not None and (utcnow() - beat).total_seconds() > self.hang_after_s:
            return "hung"
        return "wait"


def execute(cat: Catalogue, job_id: int) -> JobStatus:
    """Run a job already in ``running`` (in this process) and record its outcome."""
    job = get_job(cat, job_id)
    ctx = JobContext(cat, job_id)
    ctx.log(f"job {job_id} ({job.kind}) attempt {job.attempts} started in process {os.getpid()}")
    try:
        handler = get_handler(job.kind)

        # what the job changes is audited under whoever queued it (a job runs in its own process)
        with acting_as(str(job.params.get("user") or "") or submitter_of_job(cat, job_id)):
            result = handler(cat, dict(job.params), ctx) or {}
    except JobCancelled:
        message = cancelled_message(get_job(cat, job_id))
        ctx.log(message)
        _finish(cat, job_id, JobStatus.cancelled, message=message)
        return get_job(cat, job_id).status
    except Exception as exc:  # the job failed; the worker lives on
        if ctx.cancelled():  # a pipeline stopped on the cancel request with its own exception
            message = cancelled_message(get_job(cat, job_id))
            ctx.log(message)
            _finish(cat, job_id, JobStatus.cancelled, message=message)
            return get_job(cat, job_id).status
        tb = "".join(traceback.format_exception(exc))
        ctx.log(f"failed: {exc}\n{tb}")
        _finish(cat, job_id, JobStatus.failed, message=f"failed: {exc}", error=tb[-20000:])
        return get_job(cat, job_id).status
    summary = job_summary(job.kind, result)
    ctx.log(f"succeeded: {summary}")
    _finish(cat, job_id, JobStatus.succeeded, progress=1.0, result=result, message=summary)
    return get_job(cat, job_id).status


def run_job(cat: Catalogue, job_id: int) -> JobStatus:
    """Synchronous mode: claim this specific queued job and run it in this process."""
    now = utcnow()
    try:
        won = transition(cat, job_id, JobStatus.running, expect={JobStatus.queued}, started_at=now,
                         heartbeat_at=now, worker=worker_name(), message="started", attempts=Job.attempts + 1)
    except InvalidTransition as exc:
        raise JobError(f"job {job_id} cannot be run: {exc}") from None
    if not won:
        raise JobError(f"job {job_id} was taken by another worker")
    return execute(cat, job_id)


def submit_and_run(cat: Catalogue, kind: str, params: dict[str, Any] | None = None) -> Job:
    """Submit and run synchronously; returns the finished job row."""
    job_id = submit(cat, kind, params)
    run_job(cat, job_id)
    return get_job(cat, job_id)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def worker_alive(worker: str | None) -> bool | None:
    """True/False when ``worker`` ("host:pid") runs on this host and its process is / is not alive;
    None when it runs elsewhere (only its heartbeat can tell)."""
    if not worker or ":" not in worker:
        return None
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return None
    return _pid_alive(int(pid))


def recover_stale_jobs(cat: Catalogue, *, stale_after_s: float = STALE_AFTER_S, requeue: bool | None = None,
                       now: datetime | None = None) -> list[int]:
    """Running jobs whose worker died: on this host, a dead worker process; elsewhere, no heartbeat
    for ``stale_after_s``. Each is queued again while it has attempts left (``requeue=None``), else failed;
    ``requeue`` True/False forces one or the other. Jobs of a live worker on this host are left to it
    (its supervisor stops them when they hang)."""
    cutoff = (now or utcnow()) - timedelta(seconds=stale_after_s)
    recovered = []
    with cat.unit_of_work() as s:
        running = list(s.scalars(select(Job).where(Job.status == JobStatus.running)))
    for job in running:
        alive = worker_alive(job.worker)
        stale = job.heartbeat_at is None or job.heartbeat_at < cutoff
        if alive is True or (alive is None and not stale):
            continue
        if job.pid and alive is False and _pid_alive(job.pid):
            _kill_tree(job.pid)  # an orphaned child of a dead worker
        again = (job.attempts < job.max_attempts) if requeue is None else requeue
        beat = f"{job.heartbeat_at:%Y-%m-%d %H:%M:%S} UTC" if job.heartbeat_at else "never"
        msg = (f"the worker {job.worker} stopped (last progress {beat}, attempt {job.attempts} of {job.max_attempts})"
               + ("; queued again" if again else "; press retry to run it again"))
        won = transition(cat, job.id, JobStatus.queued if again else JobStatus.failed, expect={JobStatus.running},
                         message=msg, error=None if again else msg, finished_at=None if again else utcnow(),
                         worker=None, pid=None)
        if won:
            recovered.append(job.id)
    return recovered


def _kill_tree(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
