"""The pre-forked job runner (jobs.prefork): jobs run in children forked by a zygote, each in its own process; a
crash, a cancel and the supervisor's death behave as with a fresh process; where the zygote cannot start, a fresh
process runs the job and the log says so; a job queued in the worker's process wakes it at once."""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from db.models import JobStatus
from db.session import open_catalogue
from jobs import prefork, queue
from jobs.worker import run_one, start_worker_thread

FALLBACK = "pre-forked runner unavailable"


@pytest.fixture(scope="module")
def zygote():
    """This process's zygote, ready; it preloads only what the sleep jobs need, not torch (the import that
    makes a production zygote worth having would cost these tests seconds and prove nothing more)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(prefork, "PRELOAD", ("jobs.queue", "jobs.runner"))
        prefork.reset()
        z = prefork.shared_zygote()
        z.wait_ready()
        yield z
        prefork.reset()


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


def wait_for(predicate, *, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line.split()[1] for line in fh if line.startswith("PPid:")))


def log_of(cat, jid: int) -> str:
    return (cat.data_dir / "jobs" / str(jid) / "log.txt").read_text()


def test_a_job_is_forked_by_the_zygote_and_a_cancel_still_ends_it(zygote, cat):
    """The job's process is a child of the zygote (not of this supervisor, not a fresh interpreter); one that
    ignores the cancel is ended with its process group after the grace period, as before."""
    jid = queue.submit(cat, "sleep", {"steps": 600, "seconds": 0.05, "ignore_cancel": True})
    t = threading.Thread(target=run_one, args=(cat,), kwargs={"cancel_grace_s": 0.3})
    t.start()
    try:
        wait_for(lambda: queue.get_job(cat, jid).progress > 0, what="progress")
        pid = queue.get_job(cat, jid).pid
        assert pid != os.getpid() and parent_of(pid) == zygote.info["pid"]
        assert queue.request_cancel(cat, jid) == JobStatus.running
    finally:
        t.join(30)
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.cancelled and "grace" in job.message
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert FALLBACK not in log_of(cat, jid)


def test_a_hard_crash_fails_the_job_and_the_next_job_is_forked_again(zygote, cat):
    crash = queue.submit(cat, "sleep", {"steps": 3, "seconds": 0, "crash": 1}, max_attempts=1)
    assert run_one(cat) == crash
    job = queue.get_job(cat, crash)
    assert job.status == JobStatus.failed and "killed by SIGKILL" in job.message and "log tail" in job.error
    assert zygote.alive()  # the crash took down its own process only
    nxt = queue.submit(cat, "sleep", {"steps": 1, "seconds": 0})
    assert run_one(cat) == nxt
    assert queue.get_job(cat, nxt).status == JobStatus.succeeded
    assert f"job {nxt} succeeded" in log_of(cat, nxt) and FALLBACK not in log_of(cat, nxt)
    assert prefork.shared_zygote() is zygote and zygote.alive()


def test_a_forked_job_ends_when_its_supervisor_dies(zygote, cat):
    """The supervisor holds the only write end of the child's liveness pipe; its death (which closes it) ends the
    child, whose parent -- the zygote -- lives on."""
    jid = queue.submit(cat, "sleep", {"steps": 600, "seconds": 0.05})
    queue.claim_next(cat)
    with open(queue.job_dir(cat, jid) / "log.txt", "ab") as out:
        child = prefork.spawn_job(job_id=jid, data_dir=str(cat.data_dir), database_url=cat.url, log_fd=out.fileno())
    wait_for(lambda: queue.get_job(cat, jid).progress > 0, what="progress")
    assert child.poll() is None
    os.close(child._alive_w)  # what the kernel does when the supervisor dies
    child._alive_w = os.open(os.devnull, os.O_RDONLY)  # (closed again when the exit is collected)
    assert child.wait(timeout=10) == 3  # the watchdog's exit code
    assert zygote.alive()


def test_a_job_queued_in_the_workers_process_wakes_it_at_once(zygote, cat):
    """With a 30 s poll, only the in-process wake-up can start the job within seconds."""
    threads, stop = start_worker_thread(cat, poll_s=30.0, queues=(queue.LIGHT,))
    try:
        time.sleep(0.3)  # the worker has looked once and is idle
        t0 = time.monotonic()
        jid = queue.submit(cat, "sleep", {"steps": 1, "seconds": 0})
        wait_for(lambda: queue.get_job(cat, jid).status == JobStatus.succeeded, timeout=10, what="the job")
        assert time.monotonic() - t0 < 5
    finally:
        stop.set()
        for t in threads:
            t.join(5)
    assert not any(t.is_alive() for t in threads)  # the stop is seen within a wait slice


def test_without_a_zygote_a_fresh_process_runs_the_job_and_the_log_says_so(cat, monkeypatch, caplog):
    prefork.reset()
    monkeypatch.setattr(prefork, "ZYGOTE_MODULE", "no_such_zygote_module")
    try:
        dying = prefork.shared_zygote()  # started as by a worker that starts; this one dies at once
        wait_for(lambda: dying.exit_code is not None, what="the zygote to exit")
        jid = queue.submit(cat, "sleep", {"steps": 1, "seconds": 0})
        with caplog.at_level(logging.WARNING, logger="rosette.worker"):
            assert run_one(cat) == jid
        job = queue.get_job(cat, jid)
        assert job.status == JobStatus.succeeded, job.message
        text = log_of(cat, jid)
        assert f"{FALLBACK} (the pre-forked runner exited with code 1 before it was ready)" in text
        assert f"job {jid} succeeded" in text  # the fresh process's own last line
        assert any(FALLBACK in r.getMessage() for r in caplog.records)
        with pytest.raises(prefork.PreforkUnavailable, match="exited with code 1"):
            prefork.shared_zygote()  # given up for a while: the next jobs do not wait for another failed start
    finally:
        prefork.reset()
