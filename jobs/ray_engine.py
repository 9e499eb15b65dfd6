"""The Ray engine of the job worker (``rosette worker --engine ray [--address HOST:PORT]``).

The worker claims jobs from the same ``jobs`` table as the local engine (:func:`jobs.queue.claim_next`, its
``worker`` column set to ``ray:<address>``, empty for a local cluster) and runs each as Ray work:

- ``embed`` (warm the feature cache of a species) is a Ray Data pipeline, see :mod:`jobs.ray_embedding`;
- every other kind (evaluate, diagnose, train, ...) is one Ray task with declared resources (``num_gpus=1`` for
  training when the cluster has a GPU) that opens the catalogue itself and runs the kind's handler through
  :func:`jobs.queue.execute`, exactly as the local engine's child process does: progress, heartbeat, log and
  outcome go to the jobs table and the job's folder. The Ray workers therefore need the data directory at the
  same path (a shared filesystem) and the database URL must reach the catalogue from them.

This process supervises each job like :func:`jobs.worker.supervise`: a cancel request is given
``cancel_grace_s`` to stop by itself, then ``ray.cancel(ref, force=True)`` and the job is cancelled; no progress
for the hang limit -> cancelled by force and failed as hung; a Ray worker lost mid-job (crash, out of memory,
node lost) -> queued again while attempts remain, else failed, with a message. A cluster that cannot be reached
raises :class:`RayUnavailable` naming the address, and the job it had claimed goes back to the queue with that
message (the attempt not counted).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import (
    LocalRayletDiedError,
    NodeDiedError,
    ObjectLostError,
    OutOfMemoryError,
    RayActorError,
    RaySystemError,
    TaskCancelledError,
    WorkerCrashedError,
)

from db.models import Job, JobStatus
from db.session import Catalogue, open_catalogue
from jobs.context import JobCancelled, JobContext, job_dir
from jobs.queue import (
    STALE_AFTER_S,
    JobError,
    JobWatch,
    _finish,
    cancelled_message,
    claim_next,
    execute,
    get_job,
    recover_stale_jobs,
    requeue_or_fail,
    transition,
)
from jobs.ray_embedding import EmbedSettings, ray_embed
from jobs.registry import EXTRA_KINDS_ENV

REPO_ROOT = Path(__file__).resolve().parent.parent
ENGINE_PREFIX = "ray:"
CANCEL_GRACE_S = 10.0
CONNECT_TIMEOUT_S = 5.0
GPU_KINDS = frozenset({"train"})  # kinds that get a whole GPU when the cluster has one
_LOCK = threading.Lock()
_STATE: dict[str, str] = {}  # "label": this process's engine label once connected
_RUNNING: set[int] = set()  # jobs this process is running on Ray now
log = logging.getLogger("rosette.worker.ray")


class RayUnavailable(JobError):
    """The Ray cluster cannot be reached; the message names the address (no traceback for curators)."""


def engine_label(address: str | None) -> str:
    """What the ``worker`` column of a Ray job says: ``ray:<address>`` (``ray:`` alone for a local cluster)."""
    return ENGINE_PREFIX + (address or "")


def _check_reachable(address: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """A TCP connection to HOST:PORT within ``timeout_s`` (ray.init itself would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise RayUnavailable(f"the Ray address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise RayUnavailable(f"the Ray cluster at {address} cannot be reached ({exc.strerror or exc}); is "
                             f"`ray start --head` running there, and is port {port} open to this machine?") from None


def _runtime_env() -> dict[str, Any]:
    """Environment of this job's Ray workers: Rosette importable (the repository at the same path on a shared
    filesystem, or installed there) and the extra job-kind modules this process uses."""
    env = {"PYTHONPATH": f"{REPO_ROOT}{os.pathsep}${{PYTHONPATH}}"}  # Ray expands ${...} from the node's own
    if os.environ.get(EXTRA_KINDS_ENV):
        env[EXTRA_KINDS_ENV] = os.environ[EXTRA_KINDS_ENV]
    return {"env_vars": env}


def connect(address: str | None = None, *, num_cpus: int | None = None) -> str:
    """Connect this process to Ray once (later calls reuse the connection) and return the engine label.

    ``address`` (HOST:PORT of a cluster's head, from ``ray start --head``) is checked with a TCP connection first;
    without one, a local cluster is started (``num_cpus``, no dashboard) unless this process is already
    connected. Raises :class:`RayUnavailable` with a one-line message naming the address."""
    if address:
        _check_reachable(address)
    with _LOCK:
        if ray.is_initialized():
            return _STATE.setdefault("label", engine_label(address))
        try:
            if address:
                ray.init(address=address, log_to_driver=False, runtime_env=_runtime_env())
            else:
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False,
                         runtime_env=_runtime_env())
        except Exception as exc:  # noqa: BLE001 - any failure to connect is one line for the curator
            where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise RayUnavailable(f"{where} could not be used: {first[:300]}") from None
        _STATE["label"] = engine_label(address)
        return _STATE["label"]


def cluster_gpus() -> float:
    """The GPUs the connected cluster declares (what a ``--device cuda`` training request may count on)."""
    return float(ray.cluster_resources().get("GPU", 0))


def task_resources(kind: str) -> dict[str, float]:
    """Declared resources of a job's Ray task: one CPU; a GPU for training when the cluster has one."""
    gpus = 1.0 if kind in GPU_KINDS and ray.cluster_resources().get("GPU", 0) >= 1 else 0.0
    return {"num_cpus": 1.0, "num_gpus": gpus}


@ray.remote(max_retries=0)  # Rosette's own attempts decide whether a lost job runs again
def run_job_task(data_dir: str, url: str, job_id: int) -> str:
    """Inside a Ray worker: open the catalogue and run the job (already ``running``) with its kind's handler;
    the outcome is recorded in the jobs table, as by ``python -m jobs.runner``."""
    cat = open_catalogue(data_dir, url=url, migrate=False)
    try:
        return execute(cat, job_id).value
    finally:
        cat.close()


# a Ray worker, actor or node lost mid-job (a crash, out of memory, a killed process): the job may run again
LOST = (WorkerCrashedError, RayActorError, NodeDiedError, ObjectLostError, OutOfMemoryError, RaySystemError,
        LocalRayletDiedError)


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (a RayTaskError's ``cause``, ``__cause__``), outermost first."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain and len(chain) < 8:
        chain.append(exc)
        exc = getattr(exc, "cause", None) or exc.__cause__
    return chain


def is_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says a Ray worker, actor or node was lost (rather than an error in Rosette's code)."""
    return any(isinstance(e, LOST) for e in _causes(exc))


def _words(exc: BaseException) -> str:
    inner = _causes(exc)[-1]
    first = (str(inner).strip().splitlines() or [""])[0][:300]
    what = f"{type(inner).__name__}{': ' + first if first else ''}"
    if is_lost(exc):
        return f"its Ray worker was lost ({what})"
    return (f"its Ray task failed outside the job's own code ({what}); do the Ray workers see this data "
            "directory at the same path and reach the database?")


def _log(cat: Catalogue, job_id: int, text: str) -> None:
    with open(job_dir(cat, job_id) / "log.txt", "a", encoding="utf-8") as fh:
        fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ray supervisor: {text}\n")


def supervise_task(cat: Catalogue, job_id: int, *, poll_s: float = 0.25, cancel_grace_s: float = CANCEL_GRACE_S,
                   hang_after_s: float | None = None) -> JobStatus:
    """Run a job already in ``running`` as a Ray task and watch it until it ends (cancel, hang, lost worker)."""
    job = get_job(cat, job_id)
    hang_after_s = float(job.params.get("hang_after_s", hang_after_s or STALE_AFTER_S))
    ref = run_job_task.options(**task_resources(job.kind)).remote(str(cat.data_dir), cat.url, job_id)
    watch = JobWatch(cat, job_id, cancel_grace_s=cancel_grace_s, hang_after_s=hang_after_s)
    outcome: tuple[JobStatus, str] | None = None
    while True:
        ready, _ = ray.wait([ref], timeout=poll_s)
        if ready:
            break
        seen = watch.poll()
        if seen == "recorded":
            ready, _ = ray.wait([ref], timeout=max(5.0, cancel_grace_s))
            if not ready:
                ray.cancel(ref, force=True)
            break
        if seen == "cancel":
            ray.cancel(ref, force=True)
            grace = f" (its Ray task was stopped after a {cancel_grace_s:g} s grace)"
            outcome = (JobStatus.cancelled, cancelled_message(watch.job, extra=grace))
            break
        if seen == "hung":
            ray.cancel(ref, force=True)
            outcome = (JobStatus.failed,
                       f"no progress for {hang_after_s:.0f} s: the job was hung and its Ray task was stopped")
            break
    error: BaseException | None = None
    try:
        ray.get(ref, timeout=60)
    except TaskCancelledError:
        pass
    except Exception as exc:  # noqa: BLE001 - a lost worker, a killed process, an error outside the handler
        error = exc
    if get_job(cat, job_id).status == JobStatus.running:
        if outcome is not None:
            status, msg = outcome
            _finish(cat, job_id, status, message=msg, error=msg if status == JobStatus.failed else None)
        else:
            why = _words(error) if error is not None else "its Ray task ended without recording an outcome"
            tail = "".join(traceback.format_exception(error)) if error is not None else ""
            requeue_or_fail(cat, job_id, why, detail=tail, again=error is None or is_lost(error))
    _log(cat, job_id, get_job(cat, job_id).message or "")
    return get_job(cat, job_id).status


def run_embed(cat: Catalogue, job_id: int, *, settings: EmbedSettings | None = None) -> JobStatus:
    """Run an ``embed`` job already in ``running`` through the Ray Data pipeline, driven from this process, and
    record its outcome (the same result as the local engine's ``embed`` handler)."""
    job = get_job(cat, job_id)
    ctx = JobContext(cat, job_id)
    ctx.log(f"job {job_id} (embed) attempt {job.attempts} started on Ray (Ray Data pipeline)")
    try:
        result = ray_embed(cat, dict(job.params), ctx, settings=settings)
    except JobCancelled:
        message = cancelled_message(get_job(cat, job_id))
        ctx.log(message)
        _finish(cat, job_id, JobStatus.cancelled, message=message)
        return get_job(cat, job_id).status
    except Exception as exc:  # noqa: BLE001 - the job failed (or lost an actor); the worker lives on
        tb = "".join(traceback.format_exception(exc))
        if is_lost(exc):  # an actor or task of the pipeline was lost: the job may run again
            ctx.log(f"{_words(exc)}\n{tb}")
            requeue_or_fail(cat, job_id, _words(exc), detail=tb)
        else:
            ctx.log(f"failed: {exc}\n{tb}")
            _finish(cat, job_id, JobStatus.failed, message=f"failed: {exc}", error=tb[-20000:])
        return get_job(cat, job_id).status
    ctx.log(f"succeeded: {result['summary']}")
    _finish(cat, job_id, JobStatus.succeeded, progress=1.0, result=result, message=result["summary"])
    return get_job(cat, job_id).status


def run_claimed(cat: Catalogue, job_id: int, *, address: str | None = None, num_cpus: int | None = None,
                poll_s: float = 0.25, cancel_grace_s: float = CANCEL_GRACE_S,
                embed: EmbedSettings | None = None) -> JobStatus:
    """Run a job this worker already claimed on Ray. When the cluster cannot be reached, the job goes back to the
    queue with the reason (its attempt not counted) and :class:`RayUnavailable` is raised."""
    try:
        connect(address, num_cpus=num_cpus)
    except RayUnavailable as exc:
        transition(cat, job_id, JobStatus.queued, expect={JobStatus.running}, message=f"waiting: {exc}",
                   worker=None, pid=None, started_at=None, attempts=Job.attempts - 1)
        _log(cat, job_id, str(exc))
        raise
    _RUNNING.add(job_id)
    try:
        if get_job(cat, job_id).kind == "embed":
            return run_embed(cat, job_id, settings=embed)
        return supervise_task(cat, job_id, poll_s=poll_s, cancel_grace_s=cancel_grace_s)
    finally:
        _RUNNING.discard(job_id)


def release_running(cat: Catalogue, *, why: str = "the Ray worker was stopped") -> list[int]:
    """When this worker stops (Ctrl-C) with jobs still running on Ray (its Ray work ends with it): each is queued
    again while it has attempts left, else failed, with ``why``. Returns their ids."""
    released = sorted(_RUNNING)
    for job_id in released:
        requeue_or_fail(cat, job_id, why)
        _log(cat, job_id, why)
    return released


def run_one(cat: Catalogue, *, address: str | None = None, queue: str | None = None, num_cpus: int | None = None,
            poll_s: float = 0.25, cancel_grace_s: float = CANCEL_GRACE_S,
            embed: EmbedSettings | None = None) -> int | None:
    """Claim one queued job (of ``queue``, or any) for Ray and run it; its id, or None when none was queued."""
    job_id = claim_next(cat, worker=engine_label(address), queue=queue)
    if job_id is None:
        return None
    run_claimed(cat, job_id, address=address, num_cpus=num_cpus, poll_s=poll_s, cancel_grace_s=cancel_grace_s,
                embed=embed)
    return job_id


def work_loop(cat: Catalogue, *, address: str | None = None, stop: threading.Event | None = None,
              poll_s: float = 1.0, queue: str | None = None, num_cpus: int | None = None,
              max_jobs: int | None = None, on_unavailable: Any = None) -> int:
    """Run jobs of ``queue`` on Ray until ``stop`` is set (or ``max_jobs`` ran); returns how many ran. A cluster
    that cannot be reached stops the loop (``on_unavailable(exc)`` is called, then ``stop`` is set)."""
    stop = stop or threading.Event()
    done = 0
    while not stop.is_set() and (max_jobs is None or done < max_jobs):
        try:
            recover_stale_jobs(cat)
            if run_one(cat, address=address, queue=queue, num_cpus=num_cpus) is None:
                stop.wait(poll_s)
            else:
                done += 1
        except RayUnavailable as exc:
            if on_unavailable is not None:
                on_unavailable(exc)
            stop.set()
        except Exception:  # the worker outlives any job or database hiccup
            log.exception("ray worker loop error (continuing)")
            stop.wait(poll_s)
    return done


__all__ = ["RayUnavailable", "connect", "engine_label", "is_lost", "release_running", "run_claimed", "run_embed",
           "run_job_task", "run_one", "supervise_task", "task_resources", "work_loop"]
