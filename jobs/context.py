"""What a running job's handler is handed: progress (with each step's time left), log, metrics, checkpoints
and cancellation, all stored under the job's row and folder."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from core.progress import PhaseClock
from db.models import Job, JobStatus, utcnow
from db.session import Catalogue


class JobCancelled(Exception):
    """Raised inside a handler (via ``ctx.check_cancelled()``) to stop a job the curator cancelled."""


def job_dir(cat: Catalogue, job_id: int) -> Path:
    """``<data_dir>/jobs/<id>/``: log.txt, metrics.jsonl, checkpoints/ (created on demand)."""
    d = cat.data_dir / "jobs" / str(int(job_id))
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class JobContext:
    """Handed to a running handler: progress, log, metrics, checkpoints and cancellation."""

    cat: Catalogue
    job_id: int
    _dir: Path | None = field(default=None, repr=False)

    @property
    def dir(self) -> Path:
        if self._dir is None:
            self._dir = job_dir(self.cat, self.job_id)
        return self._dir

    @property
    def checkpoint_dir(self) -> Path:
        d = self.dir / "checkpoints"
        d.mkdir(parents=True, exist_ok=True)
        return d

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report progress (0..1); this is what beats the heartbeat."""
        fields: dict[str, Any] = {"progress": max(0.0, min(1.0, float(fraction))), "heartbeat_at": utcnow()}
        if message is not None:
            fields["message"] = message
        with self.cat.unit_of_work() as s:
            s.execute(update(Job).where(Job.id == self.job_id, Job.status == JobStatus.running).values(**fields))
            s.commit()

    def log(self, text: str) -> None:
        """Append a time-stamped line to the job's ``log.txt``."""
        with open(self.dir / "log.txt", "a", encoding="utf-8") as fh:
            fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n")

    def metric(self, row: dict[str, Any]) -> None:
        """Append one JSON row (step, epoch, losses, validation metrics) to ``metrics.jsonl``."""
        with open(self.dir / "metrics.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, default=float) + "\n")

    def cancelled(self) -> bool:
        with self.cat.unit_of_work() as s:
            return bool(s.scalar(select(Job.cancel_requested).where(Job.id == self.job_id)))

    def check_cancelled(self) -> None:
        if self.cancelled():
            raise JobCancelled()

    def callback(self, *, start: float = 0.0, end: float = 1.0, label: str = "") -> Callable[[int, int], None]:
        """A ``progress(done, total)`` callback for core pipelines, mapped onto [start, end]."""

        clock = PhaseClock(label)

        def report(done: int, total: int) -> None:
            frac = start + (end - start) * (done / total if total else 1.0)
            self.progress(frac, clock.words(done, total))  # this step's share done and its time left

        return report
