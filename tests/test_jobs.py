"""Job queue: transitions, sync mode, progress, cancel, failures, a worker killed mid-job."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from db.models import JobStatus, utcnow
from db.session import open_catalogue
from jobs import queue
from jobs.worker import run_one


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


def test_transitions_are_enforced():
    queue.check_transition(JobStatus.queued, JobStatus.running)
    with pytest.raises(queue.InvalidTransition):
        queue.check_transition(JobStatus.succeeded, JobStatus.running)
    with pytest.raises(queue.InvalidTransition):
        queue.check_transition(JobStatus.queued, JobStatus.succeeded)
    for terminal in queue.TERMINAL:
        assert JobStatus.running not in queue.TRANSITIONS[terminal]


def test_sync_run_succeeds_with_progress_and_result(cat):
    job = queue.submit_and_run(cat, "sleep", {"steps": 3, "seconds": 0})
    assert job.status == JobStatus.succeeded
    assert job.progress == 1.0 and job.result == {"summary": "slept 3 steps", "steps": 3}
    assert job.started_at is not None and job.finished_at >= job.started_at


def test_failure_is_recorded_and_retry_requeues(cat):
    job = queue.submit_and_run(cat, "sleep", {"steps": 1, "seconds": 0, "fail": "disk full"})
    assert job.status == JobStatus.failed
    assert "disk full" in job.message and "RuntimeError" in job.error
    queue.retry(cat, job.id)
    assert queue.get_job(cat, job.id).status == JobStatus.queued


def test_unknown_kind_is_refused(cat):
    with pytest.raises(queue.JobError, match="unknown job kind"):
        queue.submit(cat, "no-such-kind")


def test_cancel_queued_and_running(cat):
    jid = queue.submit(cat, "sleep", {"steps": 2})
    assert queue.request_cancel(cat, jid) == JobStatus.cancelled
    assert run_one(cat) is None  # nothing left to run

    jid = queue.submit(cat, "sleep", {"steps": 50, "seconds": 0})
    assert queue.claim_next(cat) == jid
    queue.request_cancel(cat, jid)  # the handler sees it at its next check
    assert queue.execute(cat, jid) == JobStatus.cancelled
    assert queue.get_job(cat, jid).message == "cancelled by the curator"


def test_claim_is_exclusive(cat):
    jid = queue.submit(cat, "sleep", {"steps": 1})
    assert queue.claim_next(cat, worker="a") == jid
    assert queue.claim_next(cat, worker="b") is None
    with pytest.raises(queue.InvalidTransition):
        queue.run_job(cat, jid)


def test_stale_running_job_is_failed_not_lost(cat):
    jid = queue.submit(cat, "sleep", {"steps": 1})
    queue.claim_next(cat, worker="ghost")
    assert queue.recover_stale_jobs(cat) == []  # fresh heartbeat: not stale
    later = utcnow() + timedelta(seconds=queue.STALE_AFTER_S + 1)
    assert queue.recover_stale_jobs(cat, now=later) == [jid]
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.failed and "ghost stopped" in job.message


@pytest.mark.slow
def test_worker_process_killed_mid_job_then_recovered(cat, data_dir):
    jid = queue.submit(cat, "sleep", {"steps": 200, "seconds": 0.1})
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "--data-dir", str(data_dir), "worker", "--once",
                             "--heartbeat", "0.2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while queue.get_job(cat, jid).progress < 0.02:
            assert time.monotonic() < deadline, "worker never made progress"
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.running and 0 < job.progress < 1
    assert queue.recover_stale_jobs(cat, stale_after_s=0.0, requeue=True) == [jid]
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.queued and "stopped" in job.message
    # a fresh worker finishes it
    queue.get_job(cat, jid)
    with cat.unit_of_work() as s:
        from db.models import Job
        s.get(Job, jid).params = {"steps": 2, "seconds": 0}
        s.commit()
    assert run_one(cat) == jid
    assert queue.get_job(cat, jid).status == JobStatus.succeeded
