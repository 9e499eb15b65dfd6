"""Job start: seconds from queueing a small real job on an idle worker to the job's first log line, through the
pre-forked runner (a zygote that imported torch and timm once) and through a fresh ``python -m jobs.runner`` beside
it; and what an idle worker's poll of the jobs table costs.

The job is a Camtrap DP export of a catalogue of one camera station and no photos, tables only
(``camtrap_dp_export``: a production kind that takes well under a second once started).
The worker runs as in ``rosette serve``: a thread of this process, which
queues the job, so the in-process wake-up is part of the figure; the first log line is the one ``execute`` writes
("job N (kind) attempt 1 started in process PID") before the handler runs.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from core.field.stations import DeploymentSpec  # noqa: E402
from db.records.deployments import add_deployment  # noqa: E402
from db.models import JobStatus  # noqa: E402
from db.session import Catalogue, open_catalogue  # noqa: E402
from jobs import prefork, queue  # noqa: E402
from jobs.worker import IDLE_POLL_S, start_worker_thread  # noqa: E402

JOBS = 5
KIND = "camtrap_dp_export"


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.002)


def _first_lines(cat: Catalogue, out: Path, *, prefork_ok: bool) -> list[float]:
    """Seconds to the first log line of each of :data:`JOBS` jobs queued one at a time on an idle worker."""
    threads, stop = start_worker_thread(cat, queues=(queue.LIGHT,), prefork_ok=prefork_ok)
    try:
        if prefork_ok:
            prefork.shared_zygote().wait_ready()  # an idle worker: its zygote's imports are done
        seconds = []
        for i in range(JOBS):
            time.sleep(0.5)  # idle: the worker is waiting for work
            t0 = time.perf_counter()
            jid = queue.submit(cat, KIND, {"user": "bench", "out": str(out / f"package-{prefork_ok}-{i}"),
                                           "include_media": False})
            log = cat.data_dir / "jobs" / str(jid) / "log.txt"
            _wait(lambda: log.exists() and "started in process" in log.read_text(), 120, f"job {jid}'s first line")
            seconds.append(time.perf_counter() - t0)
            _wait(lambda: queue.get_job(cat, jid).status in queue.TERMINAL, 120, f"job {jid} to end")
            job = queue.get_job(cat, jid)
            if job.status != JobStatus.succeeded:
                raise RuntimeError(f"job {jid} {job.status.value}: {job.message}")
            if prefork_ok and "pre-forked runner unavailable" in log.read_text():
                raise RuntimeError(f"job {jid} started a fresh process: the figure would not be the pre-forked one")
        return seconds
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def _idle_cpu(cat: Catalogue, seconds: float = 5.0) -> float:
    """Percent of one core an idle worker (both queues, the default poll) spends in this process."""
    threads, stop = start_worker_thread(cat, prefork_ok=False)
    try:
        time.sleep(1.0)
        c0, t0 = time.process_time(), time.perf_counter()
        time.sleep(seconds)
        return 100 * (time.process_time() - c0) / (time.perf_counter() - t0)
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def run() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="rosette-bench-job-start-") as tmp:
        cat = open_catalogue(Path(tmp) / "data")
        try:
            add_deployment(cat, DeploymentSpec(key="cam-1", start=datetime(2024, 5, 1, tzinfo=timezone.utc),
                                               end=datetime(2024, 6, 1, tzinfo=timezone.utc), lat=-25.0, lon=31.5),
                           user="bench")
            prefork.reset()
            t0 = time.perf_counter()
            prefork.warm_up()
            info = prefork.shared_zygote().wait_ready()
            ready_s = time.perf_counter() - t0
            forked = _first_lines(cat, Path(tmp), prefork_ok=True)
            fresh = _first_lines(cat, Path(tmp), prefork_ok=False)
            idle = _idle_cpu(cat)
        finally:
            prefork.reset()
            cat.close()
    rows.append({"benchmark": "queued -> first log line, pre-forked runner (median)",
                 "value": statistics.median(forked), "unit": "s", "goal": "< 1 s",
                 "note": f"{JOBS} {KIND} jobs on an idle worker, max {max(forked):.2f} s; the zygote was ready "
                         f"{ready_s:.1f} s after it started (imported {', '.join(info['imported'])})"})
    rows.append({"benchmark": "queued -> first log line, fresh process (median)",
                 "value": statistics.median(fresh), "unit": "s", "goal": "< 1 s",
                 "note": f"the fallback (and the old path): python -m jobs.runner, max {max(fresh):.2f} s"})
    rows.append({"benchmark": f"idle worker CPU (2 queues, {IDLE_POLL_S} s poll)", "value": idle,
                 "unit": "% of a core", "goal": "< 1 %", "note": "polls the jobs table for work queued by "
                 "other processes; work queued in its own process wakes it at once"})
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
