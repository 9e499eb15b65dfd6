"""Job engine: one checked compare-and-set, queues, supervised child processes, crashes, cancel with a grace
period, hangs, retry rules, attempts, a worker killed mid-job."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from db.models import Job, JobStatus, utcnow
from db.session import open_catalogue
from jobs import queue
from jobs.registry import load_extra_job_kinds
from jobs.worker import run_one, start_worker_thread, work_loop


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


def wait_for(predicate, *, timeout=60.0, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_transitions_are_enforced():
    queue.check_transition(JobStatus.queued, JobStatus.running)
    with pytest.raises(queue.InvalidTransition):
        queue.check_transition(JobStatus.succeeded, JobStatus.running)
    with pytest.raises(queue.InvalidTransition):
        queue.check_transition(JobStatus.queued, JobStatus.succeeded)
    for terminal in queue.TERMINAL:
        assert JobStatus.running not in queue.TRANSITIONS[terminal]


def test_transition_is_a_checked_compare_and_set(cat):
    jid = queue.submit(cat, "sleep", {"steps": 1})
    with pytest.raises(queue.InvalidTransition, match="cannot become succeeded"):
        queue.transition(cat, jid, JobStatus.succeeded)
    with pytest.raises(queue.InvalidTransition, match="expected running"):
        queue.transition(cat, jid, JobStatus.cancelled, expect={JobStatus.running})
    assert queue.transition(cat, jid, JobStatus.running, expect={JobStatus.queued})
    assert queue.get_job(cat, jid).status == JobStatus.running


def test_nothing_but_transition_writes_status():
    """Every status write in the engine goes through ``transition`` (grep the sources)."""
    import inspect
    import re

    import jobs.queue as q
    import jobs.worker as w

    writes = [line.strip() for module in (q, w) for line in inspect.getsource(module).splitlines()
              if re.search(r"\.values\([^)]*\bstatus\s*=[^=]", line)]
    assert writes == ["res = s.execute(update(Job).where(Job.id == job_id, Job.status == old).values(status=new, **fields))"]


def test_sync_run_succeeds_with_progress_result_and_job_folder(cat):
    job = queue.submit_and_run(cat, "sleep", {"steps": 3, "seconds": 0})
    assert job.status == JobStatus.succeeded and job.attempts == 1
    assert job.progress == 1.0 and job.result["summary"] == "slept 3 steps"
    assert job.started_at is not None and job.finished_at >= job.started_at
    log = (cat.data_dir / "jobs" / str(job.id) / "log.txt").read_text()
    assert "attempt 1 started" in log and "succeeded: slept 3 steps" in log


def test_failure_is_recorded_and_retry_requeues(cat):
    job = queue.submit_and_run(cat, "sleep", {"steps": 1, "seconds": 0, "fail": "disk full"})
    assert job.status == JobStatus.failed
    assert "disk full" in job.message and "RuntimeError" in job.error
    queue.retry(cat, job.id)
    job = queue.get_job(cat, job.id)
    assert job.status == JobStatus.queued and job.error is None and job.max_attempts >= 2


def test_retry_of_a_running_or_finished_job_is_refused(cat):
    jid = queue.submit(cat, "sleep", {"steps": 1})
    assert queue.claim_next(cat, worker="a") == jid
    with pytest.raises(queue.InvalidTransition, match="cancel it first"):
        queue.retry(cat, jid)
    assert queue.get_job(cat, jid).status == JobStatus.running
    assert queue.claim_next(cat, worker="b") is None  # no second worker gets it
    done = queue.submit_and_run(cat, "sleep", {"steps": 1, "seconds": 0})
    with pytest.raises(queue.InvalidTransition, match="succeeded"):
        queue.retry(cat, done.id)


def test_unknown_kind_is_refused(cat):
    with pytest.raises(queue.JobError, match="unknown job kind"):
        queue.submit(cat, "no-such-kind")


def test_cancel_queued_and_running_in_process(cat):
    """...and the job says who cancelled it (issue 14, item 10: it said "the curator" when an admin had)."""
    from db.audit import acting_as

    jid = queue.submit(cat, "sleep", {"steps": 2})
    assert queue.request_cancel(cat, jid, by="ada") == JobStatus.cancelled
    assert queue.get_job(cat, jid).message == "cancelled by ada before it started"
    assert run_one(cat, isolate=False) is None  # nothing left to run

    jid = queue.submit(cat, "sleep", {"steps": 50, "seconds": 0})
    assert queue.claim_next(cat) == jid
    with acting_as("ines"):  # the signed-in user (the UI's guard and the CLI set it)
        queue.request_cancel(cat, jid)  # the handler sees it at its next check
    assert queue.get_job(cat, jid).message == "cancelling (asked by ines)..."
    assert queue.execute(cat, jid) == JobStatus.cancelled
    job = queue.get_job(cat, jid)
    assert job.message == "cancelled by ines" and job.cancelled_by == "ines"


def test_claim_is_exclusive(cat):
    jid = queue.submit(cat, "sleep", {"steps": 1})
    assert queue.claim_next(cat, worker="a") == jid
    assert queue.claim_next(cat, worker="b") is None
    with pytest.raises(queue.JobError):
        queue.run_job(cat, jid)


def test_kinds_go_to_their_queue_and_claims_respect_it(cat):
    assert queue.queue_of("train") == queue.HEAVY and queue.queue_of("evaluate") == queue.HEAVY
    assert queue.queue_of("mask") == queue.LIGHT and queue.queue_of("export") == queue.LIGHT
    heavy = queue.submit(cat, "sleep_heavy", {"steps": 1})
    light = queue.submit(cat, "sleep", {"steps": 1})
    assert queue.claim_next(cat, queue=queue.LIGHT) == light  # the older heavy job does not block it
    assert queue.claim_next(cat, queue=queue.LIGHT) is None
    assert queue.claim_next(cat, queue=queue.HEAVY) == heavy


def test_job_runs_in_a_supervised_child_process(cat):
    jid = queue.submit(cat, "sleep", {"steps": 2, "seconds": 0})
    assert run_one(cat) == jid
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.succeeded, job.message
    assert job.pid is not None and job.pid != os.getpid()
    assert f"job {jid} succeeded" in (cat.data_dir / "jobs" / str(jid) / "log.txt").read_text()


def test_crashing_child_is_requeued_then_resumes_and_worker_survives(cat):
    """A child killed mid-job (as out-of-memory would) leaves the worker alive; with attempts left the job is
    queued again and the next attempt continues from what the first one saved."""
    jid = queue.submit(cat, "sleep", {"steps": 4, "seconds": 0, "crash": 2, "resume": True}, max_attempts=2)
    assert run_one(cat) == jid
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.queued and "SIGKILL" in job.message and "attempt 1 of 2" in job.message
    assert run_one(cat) == jid
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.succeeded and job.attempts == 2
    assert job.result["started_at_step"] == 2  # resumed, not restarted


def test_crash_on_the_last_attempt_fails_with_the_log_tail(cat):
    jid = queue.submit(cat, "sleep", {"steps": 3, "seconds": 0, "crash": 1}, max_attempts=1)
    run_one(cat)
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.failed
    assert "killed by SIGKILL" in job.message and "out of memory" in job.message
    assert "log tail" in job.error


def test_cancel_terminates_a_job_that_does_not_stop_after_the_grace_period(cat):
    jid = queue.submit(cat, "sleep", {"steps": 600, "seconds": 0.1, "ignore_cancel": True})
    t = threading.Thread(target=run_one, args=(cat,), kwargs={"cancel_grace_s": 0.5})
    t.start()
    wait_for(lambda: queue.get_job(cat, jid).progress > 0, what="progress")
    pid = queue.get_job(cat, jid).pid
    t0 = time.monotonic()
    assert queue.request_cancel(cat, jid) == JobStatus.running  # asked, not yet stopped
    t.join(30)
    assert not t.is_alive()
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.cancelled and "grace" in job.message
    assert time.monotonic() - t0 < 15
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_job_without_progress_is_stopped_as_hung(cat):
    jid = queue.submit(cat, "sleep", {"steps": 600, "seconds": 0.05, "hang": 1, "hang_after_s": 1.0},
                       max_attempts=1)
    run_one(cat)
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.failed and "no progress for 1 s" in job.message


def test_light_queue_runs_while_a_heavy_job_is_busy(cat):
    heavy = queue.submit(cat, "sleep_heavy", {"steps": 100, "seconds": 0.1})
    light = queue.submit(cat, "sleep", {"steps": 1, "seconds": 0})
    threads, stop = start_worker_thread(cat, poll_s=0.1)
    try:
        wait_for(lambda: queue.get_job(cat, light).status == JobStatus.succeeded, what="light job")
        assert queue.get_job(cat, heavy).status == JobStatus.running
        queue.request_cancel(cat, heavy)
        wait_for(lambda: queue.get_job(cat, heavy).status == JobStatus.cancelled, what="heavy cancel")
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def test_worker_loop_survives_exceptions(cat, monkeypatch):
    import jobs.worker as w

    calls = {"n": 0}
    real = w.run_one

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("database hiccup")
        return real(*args, **kwargs)

    monkeypatch.setattr(w, "run_one", flaky)
    jid = queue.submit(cat, "sleep", {"steps": 1, "seconds": 0})
    assert work_loop(cat, max_jobs=1, poll_s=0.01, isolate=False) == 1
    assert queue.get_job(cat, jid).status == JobStatus.succeeded and calls["n"] >= 2


def test_stale_job_of_a_remote_worker_is_requeued_then_failed(cat):
    jid = queue.submit(cat, "sleep", {"steps": 1}, max_attempts=2)
    queue.claim_next(cat, worker="elsewhere:1")
    assert queue.recover_stale_jobs(cat) == []  # fresh heartbeat: not stale
    later = utcnow() + timedelta(seconds=queue.STALE_AFTER_S + 1)
    assert queue.recover_stale_jobs(cat, now=later) == [jid]
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.queued and "elsewhere:1 stopped" in job.message
    queue.claim_next(cat, worker="elsewhere:1")  # attempt 2 of 2
    assert queue.recover_stale_jobs(cat, now=later + timedelta(seconds=queue.STALE_AFTER_S + 1)) == [jid]
    assert queue.get_job(cat, jid).status == JobStatus.failed


def test_job_of_a_dead_local_worker_is_recovered_at_once(cat):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    jid = queue.submit(cat, "sleep", {"steps": 1})
    queue.claim_next(cat, worker=f"{socket.gethostname()}:{dead.pid}")
    assert queue.recover_stale_jobs(cat) == [jid]  # no need to wait for the heartbeat to age
    assert queue.get_job(cat, jid).status == JobStatus.queued


@pytest.mark.slow
def test_worker_process_killed_mid_job_then_recovered(cat, data_dir):
    jid = queue.submit(cat, "sleep", {"steps": 200, "seconds": 0.1})
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "--data-dir", str(data_dir), "worker", "--once"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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
    child = job.pid
    wait_for(lambda: subprocess.run(["kill", "-0", str(child)], capture_output=True).returncode != 0,
             timeout=15, what="the orphaned child to exit")
    assert queue.recover_stale_jobs(cat) == [jid]
    job = queue.get_job(cat, jid)
    assert job.status == JobStatus.queued and "stopped" in job.message
    with cat.unit_of_work() as s:
        s.get(Job, jid).params = {"steps": 2, "seconds": 0}
        s.commit()
    assert run_one(cat) == jid
    assert queue.get_job(cat, jid).status == JobStatus.succeeded


def test_a_jobs_steps_report_their_own_share_and_time_left(cat, monkeypatch):
    """Issue 14, item 10: a phase's message says how far that phase is and, once its pace is known, the time it
    has left (the overall bar alone sat at 13-17 % for 9 minutes)."""
    ticks = iter([0.0, 10.0, 20.0])  # the phase clock reads: start, after 10 items, after 20 items
    monkeypatch.setattr("core.progress.time.monotonic", lambda: next(ticks))
    seen: list[str] = []

    @queue.register_job_kind("test_phased")
    def phased(cat_, params, ctx):
        report = ctx.callback(start=0.5, end=1.0, label="embedding photos")
        for done in (0, 10, 20):
            report(done, 40)
            seen.append(queue.get_job(cat_, ctx.job_id).message)
        return {}

    try:
        job = queue.submit_and_run(cat, "test_phased", {})
    finally:
        queue._HANDLERS.pop("test_phased", None)
        queue._KIND_QUEUE.pop("test_phased", None)
    assert job.status == JobStatus.succeeded
    assert seen == ["embedding photos 0/40 (0% of this step)",
                    "embedding photos 10/40 (25% of this step, about 30 s left)",
                    "embedding photos 20/40 (50% of this step, about 20 s left)"]


def test_a_finished_job_leaves_its_kinds_words_a_refusal_or_its_summary_in_the_jobs_list():
    from jobs.registry import job_summary

    def words(answer):
        return f"{answer['n']} things"

    queue.register_job_kind("test_worded", summary=words)(lambda cat_, params, ctx: {})
    try:
        assert job_summary("test_worded", {"n": 3}) == "3 things"
        assert job_summary("test_worded", {"refused": True, "reason": "too few"}) == "refused: too few"  # no "n"
    finally:
        queue._HANDLERS.pop("test_worded", None)
        queue._KIND_QUEUE.pop("test_worded", None)
        queue._SUMMARIES.pop("test_worded", None)
    assert job_summary("sleep", {"summary": "slept 0 s"}) == "slept 0 s"
    assert job_summary("sleep", {"refused": True, "summary": "no density: too few"}) == "no density: too few"
    assert job_summary("sleep", {"refused": True, "reason": None}) == "refused: no reason given"
    assert job_summary("sleep", {}) == job_summary("sleep", None) == "done"


def test_the_test_job_kinds_are_not_in_the_production_registry():
    """sleep / sleep_heavy come from tests/job_kinds.py via ROSETTE_JOB_KINDS; without it they are unknown."""
    env = {k: v for k, v in os.environ.items() if k != "ROSETTE_JOB_KINDS"}
    code = "from jobs.queue import list_job_kinds; print(','.join(list_job_kinds()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout.strip().split(",")
    assert "train" in out and "embed" in out
    assert "sleep" not in out and "sleep_heavy" not in out
    assert {"sleep", "sleep_heavy"} <= set(queue.list_job_kinds())  # registered here, by the conftest fixture


def test_an_unimportable_job_kinds_module_is_named(monkeypatch):
    monkeypatch.setenv("ROSETTE_JOB_KINDS", "tests.job_kinds, no_such_module_here")
    with pytest.raises(ImportError, match="ROSETTE_JOB_KINDS names 'no_such_module_here'"):
        load_extra_job_kinds()


def test_a_tab_poll_stops_once_its_job_is_over_and_runs_while_it_is_not(cat):
    """The Export tab's polls (and the Population tab's, by the same rule): a queued or running job keeps its timer
    ticking; an ended one, or none, stops it."""
    import gradio as gr

    from app.tabs.export import _polled
    from jobs.actions.jobs import job_over

    jid = queue.submit(cat, "sleep", {"steps": 2})
    assert not job_over(cat, jid)
    assert not isinstance(_polled(cat, jid), gr.Timer)  # left running (skipped)
    queue.request_cancel(cat, jid, by="ada")
    assert job_over(cat, jid)
    stopped = _polled(cat, jid)
    assert isinstance(stopped, gr.Timer) and stopped.active is False
    assert _polled(cat, None).active is False
