"""Job kinds for the tests of the queue and the worker, registered only in test runs.

``tests/conftest.py`` names this module in ``ROSETTE_JOB_KINDS`` (read by ``jobs.registry.load_extra_job_kinds``),
so the worker's child processes register these kinds too. They are not in the production registry."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from db.session import Catalogue
from jobs.context import JobContext
from jobs.registry import HEAVY, register_job_kind


def _sleep(params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Sleeps ``steps`` x ``seconds`` with progress; ``fail`` raises, ``crash`` kills the process at step
    ``crash`` (as out-of-memory would), ``ignore_cancel`` keeps going after a cancel (a stuck job),
    ``hang`` stops reporting progress; ``resume`` counts steps in a file of the job folder across attempts."""
    steps = int(params.get("steps", 5))
    marker = ctx.dir / "steps-done.txt"
    first = int(marker.read_text()) if params.get("resume") and marker.exists() else 0
    for i in range(first, steps):
        if not params.get("ignore_cancel"):
            ctx.check_cancelled()
        if params.get("crash") is not None and i == int(params["crash"]) and not (ctx.dir / "crashed").exists():
            (ctx.dir / "crashed").write_text("1")
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(float(params.get("seconds", 0.1)))
        if params.get("hang") is not None and i >= int(params["hang"]):
            continue
        if params.get("resume"):
            marker.write_text(str(i + 1))
        ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
    if params.get("fail"):
        raise RuntimeError(str(params["fail"]))
    return {"summary": f"slept {steps} steps", "steps": steps, "started_at_step": first}


@register_job_kind("sleep")
def sleep_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A diagnostic job on the light queue (see :func:`_sleep`)."""
    return _sleep(params, ctx)


@register_job_kind("sleep_heavy", queue=HEAVY)
def sleep_heavy_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """The same diagnostic job on the heavy queue (tests of the two queues)."""
    return _sleep(params, ctx)
