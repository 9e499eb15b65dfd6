"""The job worker: claims queued jobs one at a time and runs them.

Runs as its own process (``rosette worker``) or as a daemon thread inside
``rosette serve``. A background thread beats each running job's heartbeat so a
long step without progress calls is not mistaken for a dead worker; a worker
killed mid-job stops beating, and ``recover_stale_jobs`` fails that job.
"""

from __future__ import annotations

import threading
import time

from sqlalchemy import update

from db.models import Job, JobStatus, utcnow
from db.session import Catalogue
from jobs.queue import HEARTBEAT_EVERY_S, claim_next, execute, recover_stale_jobs, worker_name


def _beat(cat: Catalogue, job_id: int, stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        with cat.unit_of_work() as s:
            s.execute(update(Job).where(Job.id == job_id, Job.status == JobStatus.running).values(heartbeat_at=utcnow()))
            s.commit()


def run_one(cat: Catalogue, *, worker: str | None = None, heartbeat_s: float = HEARTBEAT_EVERY_S) -> int | None:
    """Claim and run one queued job; returns its id, or None if the queue was empty."""
    job_id = claim_next(cat, worker=worker or worker_name())
    if job_id is None:
        return None
    stop = threading.Event()
    beater = threading.Thread(target=_beat, args=(cat, job_id, stop, heartbeat_s), daemon=True)
    beater.start()
    try:
        execute(cat, job_id)
    finally:
        stop.set()
        beater.join(timeout=5)
    return job_id


def work_loop(cat: Catalogue, *, stop: threading.Event | None = None, poll_s: float = 1.0,
              max_jobs: int | None = None, heartbeat_s: float = HEARTBEAT_EVERY_S) -> int:
    """Run jobs until ``stop`` is set (or ``max_jobs`` ran); returns how many ran."""
    stop = stop or threading.Event()
    done = 0
    recover_stale_jobs(cat)
    while not stop.is_set() and (max_jobs is None or done < max_jobs):
        if run_one(cat, heartbeat_s=heartbeat_s) is None:
            stop.wait(poll_s)
            recover_stale_jobs(cat)
        else:
            done += 1
    return done


def start_worker_thread(cat: Catalogue, *, poll_s: float = 1.0) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    t = threading.Thread(target=work_loop, args=(cat,), kwargs={"stop": stop, "poll_s": poll_s},
                         name="rosette-worker", daemon=True)
    t.start()
    return t, stop


def main_loop(cat: Catalogue) -> None:  # pragma: no cover - CLI entry
    try:
        work_loop(cat)
    except KeyboardInterrupt:
        time.sleep(0)
