"""Progress in words for long jobs: each phase its own share done and the time it has left.

A job's overall bar hides a slow phase (it sat at 13-17 % "caching views" for 9 minutes with no estimate); a
:class:`PhaseClock` per phase says "caching views 120/400 (30 % of this step, about 6 min left)", from the
pace of the items done so far in that phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

MIN_SECONDS_FOR_ETA = 2.0  # below this the pace is noise: say nothing rather than a wild guess


def duration_words(seconds: float) -> str:
    """``42 s``, ``6 min``, ``1 h 20 min``: rounded to what a person plans with."""
    s = max(0.0, float(seconds))
    if s < 60:
        return f"{max(1, round(s))} s"
    if s < 3600:
        return f"{round(s / 60)} min"
    h, rest = divmod(round(s / 60), 60)
    return f"{h} h {rest} min" if rest else f"{h} h"


@dataclass
class PhaseClock:
    """The time left in one phase of a job, from the pace of its items so far (the first report is the start,
    so set-up before the first item does not count as pace)."""

    label: str
    clock: Callable[[], float] | None = field(default=None, repr=False)  # default time.monotonic
    _start: float | None = field(default=None, repr=False)
    _start_done: int = field(default=0, repr=False)
    _last_done: int = field(default=0, repr=False)

    def seconds_left(self, done: int, total: int) -> float | None:
        now = (self.clock or time.monotonic)()
        restarted = done < self._last_done
        self._last_done = done
        if self._start is None or restarted:  # first report, or the phase started over
            self._start, self._start_done = now, done
            return None
        elapsed, items = now - self._start, done - self._start_done
        if items <= 0 or elapsed < MIN_SECONDS_FOR_ETA or done >= total:
            return None
        return elapsed / items * (total - done)

    def words(self, done: int, total: int) -> str:
        """``"<label> done/total (p % of this step, about T left)"``."""
        left = self.seconds_left(done, total)
        share = f"{100 * done / total:.0f}% of this step" if total else "this step"
        eta = f", about {duration_words(left)} left" if left is not None else ""
        return f"{self.label} {done}/{total} ({share}{eta})".strip()
