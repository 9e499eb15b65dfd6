"""The job worker: one supervised child process per job, one job per queue at a time.

Runs as its own process (``rosette worker``) or as daemon threads inside
``rosette serve`` (one per queue, so the light queue -- mask, embed, export --
never waits behind a heavy training run). For each claimed job the supervisor
starts a child in a new process group with its output in the job's ``log.txt``
and watches it. The child is forked by the pre-forked runner (:mod:`jobs.prefork`:
a zygote that imported torch and timm once, so a job starts in well under a
second); where that runner cannot start, a fresh ``python -m jobs.runner``
(seconds of imports), and the job's log says so. Either way:

- the child records its own outcome; a child that dies without one (a crash,
  out-of-memory, SIGKILL) is queued again while attempts remain, else failed,
  with the exit code or signal in the message;
- cancel = ask (the child stops at its next check), then terminate the process
  group after ``cancel_grace_s``;
- a heartbeat proves progress: with no ``ctx.progress`` for ``hang_after_s``
  (job param, default :data:`~jobs.queue.STALE_AFTER_S`) the child is killed as hung.

The loop survives any exception. ``isolate=False`` runs jobs in this process
(synchronous tests); the default is a child process. An idle worker thread wakes
at once for a job queued in its own process (the server's UI) and polls the
table every ``poll_s`` for jobs queued by other processes.

Engines: ``local`` (the default, above) or ``ray`` (:mod:`jobs.ray_engine`: the same claims from the same jobs
table, each job run as Ray work on a cluster, ``rosette worker --engine ray [--address HOST:PORT]``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

from sqlalchemy import update

from db.models import Job, JobStatus
from db.session import Catalogue
from jobs import prefork
from jobs.prefork import PreforkedChild, PreforkNotReady
from jobs.queue import (
    QUEUES,
    STALE_AFTER_S,
    JobError,
    JobWatch,
    _finish,
    _kill_tree,
    cancelled_message,
    claim_next,
    execute,
    get_job,
    job_dir,
    queued_mark,
    read_log_tail,
    recover_stale_jobs,
    requeue_or_fail,
    wait_for_queued,
    worker_name,
)

log = logging.getLogger("rosette.worker")
ENGINES = ("local", "ray")
RAY_CLUSTER_FILE = "ray-cluster.json"  # <data_dir>/jobs/: what the serving Ray worker's cluster declares
REPO_ROOT = Path(__file__).resolve().parent.parent
CANCEL_GRACE_S = 10.0
#: An idle worker's look at the jobs table for work queued by another process (a job queued in this process wakes
#: it at once). Two indexed queries per queue: about 1 % of a slow core at this rate, and a job queued by another
#: process still starts within a second.
IDLE_POLL_S = 0.5
RECOVER_EVERY_S = 1.0  # the look for jobs of dead workers, a scan of the running jobs, need not be as frequent

ChildProcess = subprocess.Popen | PreforkedChild  # both: pid, poll(), wait(timeout), returncode


def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        why = " (out of memory, or killed from outside)" if -rc == signal.SIGKILL else ""
        return f"was killed by {name}{why}"
    return f"exited with code {rc} without recording an outcome"


def _terminate(proc: ChildProcess, *, grace_s: float = 3.0) -> None:
    """SIGTERM the child's process group, then SIGKILL it if it is still there after ``grace_s``."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _kill_tree(proc.pid)
        proc.wait(timeout=30)


def _start_child(cat: Catalogue, job_id: int, out: BinaryIO, *, prefork_ok: bool) -> ChildProcess:
    """The job's process, its stdout and stderr on ``out``: forked by the pre-forked runner, or (where that cannot
    start, or ``prefork_ok`` is False) a fresh ``python -m jobs.runner``."""
    if prefork_ok:
        try:
            return prefork.spawn_job(job_id=job_id, data_dir=str(cat.data_dir), database_url=cat.url,
                                     log_fd=out.fileno())
        except Exception as exc:  # noqa: BLE001 - whatever went wrong there, the claimed job must still run
            level = logging.INFO if isinstance(exc, PreforkNotReady) else logging.WARNING
            log.log(level, "job %s: pre-forked runner unavailable (%s); starting a fresh process", job_id, exc)
            out.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor: pre-forked runner unavailable ({exc}); "
                      f"starting a fresh process\n".encode())
            out.flush()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "jobs.runner", "--data-dir", str(cat.data_dir),
                             "--database-url", cat.url, str(job_id)],
                            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, cwd=str(REPO_ROOT), env=env)


def supervise(cat: Catalogue, job_id: int, *, poll_s: float = 0.25, cancel_grace_s: float = CANCEL_GRACE_S,
              hang_after_s: float | None = None, prefork_ok: bool = True) -> JobStatus:
    """Run a job already in ``running`` in a child process and watch it until it ends (``prefork_ok`` False: in a
    fresh process, not one forked by the pre-forked runner)."""
    job = get_job(cat, job_id)
    hang_after_s = float(job.params.get("hang_after_s", hang_after_s or STALE_AFTER_S))
    folder = job_dir(cat, job_id)
    with open(folder / "log.txt", "ab") as out:
        proc = _start_child(cat, job_id, out, prefork_ok=prefork_ok)
    with cat.unit_of_work() as s:
        s.execute(update(Job).where(Job.id == job_id).values(pid=proc.pid))
        s.commit()
    watch = JobWatch(cat, job_id, cancel_grace_s=cancel_grace_s, hang_after_s=hang_after_s)
    outcome: tuple[JobStatus, str] | None = None
    while proc.poll() is None:
        time.sleep(poll_s)
        seen = watch.poll()
        if seen == "recorded":
            try:
                proc.wait(timeout=max(5.0, cancel_grace_s))
            except subprocess.TimeoutExpired:
                _terminate(proc)
            break
        if seen == "cancel":
            _terminate(proc)
            outcome = (JobStatus.cancelled,
                       cancelled_message(watch.job, extra=f" (stopped after a {cancel_grace_s:.0f} s grace)"))
            break
        if seen == "hung":
            _terminate(proc)
            outcome = (JobStatus.failed, f"no progress for {hang_after_s:.0f} s: the job was hung and was stopped")
            break
    rc = proc.wait()
    job = get_job(cat, job_id)
    if job.status == JobStatus.running:
        if outcome is None:
            tail = read_log_tail(cat, job_id, max_chars=6000)
            requeue_or_fail(cat, job_id, f"the job's process {_signal_name(rc)}", detail=f"\nlog tail:\n{tail}")
        else:
            status, msg = outcome
            _finish(cat, job_id, status, message=msg, error=msg if status == JobStatus.failed else None)
        with open(folder / "log.txt", "a", encoding="utf-8") as fh:
            fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervisor: {get_job(cat, job_id).message}\n")
    return get_job(cat, job_id).status


def run_one(cat: Catalogue, *, worker: str | None = None, queue: str | None = None, isolate: bool = True,
            cancel_grace_s: float = CANCEL_GRACE_S, poll_s: float = 0.25, prefork_ok: bool = True) -> int | None:
    """Claim and run one queued job (of ``queue``, or any); returns its id, or None if none was queued."""
    job_id = claim_next(cat, worker=worker or worker_name(), queue=queue)
    if job_id is None:
        return None
    if isolate:
        supervise(cat, job_id, cancel_grace_s=cancel_grace_s, poll_s=poll_s, prefork_ok=prefork_ok)
    else:
        execute(cat, job_id)
    return job_id


def _wait_for_work(stop: threading.Event, mark: int, poll_s: float) -> None:
    """Wait up to ``poll_s`` for a job queued in this process after ``mark``; in short slices, as ``stop`` (an
    event of its own) cannot wake the wait itself."""
    deadline = time.monotonic() + poll_s
    while not stop.is_set() and (left := deadline - time.monotonic()) > 0:
        if wait_for_queued(mark, min(left, 0.5)):
            return


def work_loop(cat: Catalogue, *, stop: threading.Event | None = None, poll_s: float = IDLE_POLL_S,
              max_jobs: int | None = None, queue: str | None = None, isolate: bool = True,
              prefork_ok: bool = True) -> int:
    """Run jobs of ``queue`` (or any) until ``stop`` is set (or ``max_jobs`` ran); returns how many ran.
    Any exception is logged and the loop goes on."""
    stop = stop or threading.Event()
    done = 0
    recovered_at = -RECOVER_EVERY_S
    while not stop.is_set() and (max_jobs is None or done < max_jobs):
        mark = queued_mark()  # before the claim: a job queued after it ends the wait below at once
        try:
            if time.monotonic() - recovered_at >= RECOVER_EVERY_S:
                recover_stale_jobs(cat)
                recovered_at = time.monotonic()
            if run_one(cat, queue=queue, isolate=isolate, prefork_ok=prefork_ok) is None:
                _wait_for_work(stop, mark, poll_s)
            else:
                done += 1
        except Exception:  # the worker outlives any job or database hiccup
            log.exception("worker loop error (continuing)")
            stop.wait(poll_s)
    return done


def start_worker_thread(cat: Catalogue, *, poll_s: float = IDLE_POLL_S, queues: tuple[str, ...] = QUEUES,
                        isolate: bool = True, prefork_ok: bool = True
                        ) -> tuple[list[threading.Thread], threading.Event]:
    """One daemon thread per queue; set the returned event to stop them. Starts the pre-forked runner now, so its
    imports are done before the first job comes."""
    if isolate and prefork_ok:
        prefork.warm_up()
    stop = threading.Event()
    threads = []
    for q in queues:
        t = threading.Thread(target=work_loop, args=(cat,), name=f"rosette-worker-{q}", daemon=True,
                             kwargs={"stop": stop, "poll_s": poll_s, "queue": q, "isolate": isolate,
                                     "prefork_ok": prefork_ok})
        t.start()
        threads.append(t)
    return threads, stop


def declare_ray_cluster(cat: Catalogue, *, label: str, gpus: float) -> None:
    """Record, for the requests queued meanwhile, that a Ray worker serves this catalogue and how many GPUs its
    cluster declares (``<data_dir>/jobs/ray-cluster.json``; removed by :func:`forget_ray_cluster` when it stops)."""
    folder = cat.data_dir / "jobs"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{RAY_CLUSTER_FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"label": label, "gpus": float(gpus), "pid": os.getpid(), "at": time.time()}))
    tmp.replace(folder / RAY_CLUSTER_FILE)


def forget_ray_cluster(cat: Catalogue) -> None:
    (cat.data_dir / "jobs" / RAY_CLUSTER_FILE).unlink(missing_ok=True)


def ray_cluster_gpus(cat: Catalogue) -> float:
    """GPUs declared by the Ray cluster of the Ray worker serving this catalogue (0 when none serves it)."""
    try:
        return float(json.loads((cat.data_dir / "jobs" / RAY_CLUSTER_FILE).read_text()).get("gpus") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        return 0.0


def _check_engine(engine: str, address: str | None) -> None:
    if engine not in ENGINES:
        raise JobError(f"unknown worker engine {engine!r}; choose one of: {', '.join(ENGINES)}")
    if address and engine != "ray":
        raise JobError("--address names a Ray cluster; use it with --engine ray")


def start_ray_threads(cat: Catalogue, *, address: str | None = None, queues: tuple[str, ...] = QUEUES,
                      poll_s: float = 1.0, num_cpus: int | None = None
                      ) -> tuple[list[threading.Thread], threading.Event, list[Exception]]:
    """Connect to Ray (raises :class:`jobs.ray_engine.RayUnavailable` naming the address), then one daemon thread
    per queue running its jobs on Ray; returns the threads, their stop event and the list that receives the
    error that stopped them (a cluster lost later)."""
    from jobs import ray_engine  # lazy: imports ray (seconds of start-up), which only --engine ray needs

    label = ray_engine.connect(address, num_cpus=num_cpus)
    declare_ray_cluster(cat, label=label, gpus=ray_engine.cluster_gpus())
    stop = threading.Event()
    errors: list[Exception] = []
    threads = []
    for q in queues:
        t = threading.Thread(target=ray_engine.work_loop, args=(cat,), name=f"rosette-ray-worker-{q}", daemon=True,
                             kwargs={"address": address, "stop": stop, "poll_s": poll_s, "queue": q,
                                     "num_cpus": num_cpus, "on_unavailable": errors.append})
        t.start()
        threads.append(t)
    return threads, stop, errors


def run_once(cat: Catalogue, *, engine: str = "local", address: str | None = None, queue: str | None = None,
             isolate: bool = True, num_cpus: int | None = None) -> int | None:
    """Claim and run one queued job with ``engine``; its id, or None when none was queued."""
    _check_engine(engine, address)
    if engine == "ray":
        from jobs import ray_engine  # lazy: imports ray (seconds of start-up), which only --engine ray needs

        return ray_engine.run_one(cat, address=address, queue=queue, num_cpus=num_cpus)
    # one job: a pre-forked runner would only add its imports (torch, timm) to this one job's start
    return run_one(cat, queue=queue, isolate=isolate, prefork_ok=False)


def main_loop(cat: Catalogue, *, queues: tuple[str, ...] = QUEUES, engine: str = "local",
              address: str | None = None, num_cpus: int | None = None) -> None:  # pragma: no cover - CLI entry
    """Serve ``queues`` with ``engine`` until interrupted; a Ray cluster that cannot be reached (at the start or
    later) ends it with :class:`jobs.ray_engine.RayUnavailable`."""
    _check_engine(engine, address)
    errors: list[Exception] = []
    if engine == "ray":
        threads, stop, errors = start_ray_threads(cat, address=address, queues=queues, num_cpus=num_cpus)
    else:
        threads, stop = start_worker_thread(cat, queues=queues)
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(1.0)
            if errors:
                stop.set()
    except KeyboardInterrupt:
        stop.set()
        if engine == "ray":  # its jobs' Ray work ends with this process: queue them again now, not after a timeout
            from jobs import ray_engine  # lazy: imports ray (seconds of start-up), which only --engine ray needs

            ray_engine.release_running(cat)
    finally:
        if engine == "ray":
            forget_ray_cluster(cat)
    if errors:
        raise errors[0]


__all__ = ["ENGINES", "JobError", "main_loop", "run_once", "run_one", "start_ray_threads", "start_worker_thread",
           "supervise", "work_loop"]
