"""Built-in job kinds. Each handler is thin: it calls one db/ or core/ function
with ``ctx`` progress / cancellation wired in, and returns a JSON result."""

from __future__ import annotations

import time
from typing import Any

from db.session import Catalogue
from jobs.queue import JobContext, register_job_kind


@register_job_kind("sleep")
def sleep_job(cat: Catalogue, params: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A diagnostic job: sleeps ``steps`` x ``seconds``, reporting progress; fails on request."""
    steps = int(params.get("steps", 5))
    for i in range(steps):
        ctx.check_cancelled()
        time.sleep(float(params.get("seconds", 0.1)))
        ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
    if params.get("fail"):
        raise RuntimeError(str(params["fail"]))
    return {"summary": f"slept {steps} steps", "steps": steps}
