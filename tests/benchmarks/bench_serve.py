"""``rosette serve``: startup time to the first HTTP 200 and peak resident memory.

Each case starts a real ``python -m app.cli serve`` subprocess on a fresh data
directory and a free port, waits for ``GET /`` to answer 200, fetches the page
config (what a browser loads next), and reads the kernel's high-water mark of
resident memory (``VmHWM`` in ``/proc/<pid>/status``) -- the exact peak RSS so far.

Cases: an empty catalogue (``--no-demo``); the same with the default backbone
loaded and warmed up at startup (``--preload``: EfficientNet-Lite0 built and one
picture embedded); and the first start that seeds the demo catalogue (when
``db.demo`` exists).
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
import urllib.request
from pathlib import Path

from tests.browser.conftest import start_rosette


def _status_kb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1])
    raise KeyError(field)


def _measure(args: list[str], *, demo: bool) -> tuple[float, float, float]:
    """(seconds to first HTTP 200, peak RSS MB, current RSS MB) of one fresh server."""
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        t0 = time.perf_counter()
        server = start_rosette(Path(tmp) / "rosette-data", demo=demo, extra_args=args, timeout=600)
        startup = time.perf_counter() - t0
        try:
            for path in ("", "config", "gradio_api/info"):
                with urllib.request.urlopen(server.url + path, timeout=60) as resp:
                    resp.read()
            pid = server.process.pid
            return startup, _status_kb(pid, "VmHWM") / 1024, _status_kb(pid, "VmRSS") / 1024
        finally:
            server.stop()


def run() -> list[dict]:
    rows: list[dict] = []
    cases = [("empty catalogue", [], False, "< 15 s", "< 600 MB"),
             ("default backbone loaded (--preload)", ["--preload"], False, "< 40 s", "< 1500 MB")]
    if importlib.util.find_spec("db.demo") is not None:
        cases.append(("first start, seeding the demo catalogue", [], True, "< 120 s", "< 1500 MB"))
    for label, args, demo, time_goal, rss_goal in cases:
        startup, peak, current = _measure(args, demo=demo)
        note = "rosette serve " + " ".join(args + ([] if demo else ["--no-demo"]))
        rows.append({"benchmark": f"serve startup to first HTTP 200, {label}", "value": round(startup, 2),
                     "unit": "s", "goal": time_goal, "note": note})
        rows.append({"benchmark": f"serve peak RSS, {label}", "value": round(peak, 1), "unit": "MB",
                     "goal": rss_goal, "note": f"VmHWM after startup + page config; RSS now {current:.0f} MB"})
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
