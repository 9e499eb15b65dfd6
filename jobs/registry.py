"""The job kinds: a handler per kind, registered with its queue (``light`` for short work, ``heavy`` for
training, embedding and evaluation). ``jobs.kinds`` registers the built-in ones; the modules named in
``ROSETTE_JOB_KINDS`` (comma-separated, e.g. the tests' ``tests.job_kinds``) register more, in the server and in the
worker's child processes alike."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from db.session import Catalogue

if TYPE_CHECKING:  # only for the handler's signature
    from jobs.context import JobContext

EXTRA_KINDS_ENV = "ROSETTE_JOB_KINDS"
LIGHT, HEAVY = "light", "heavy"
QUEUES = (LIGHT, HEAVY)

JobHandler = Callable[[Catalogue, dict[str, Any], "JobContext"], dict[str, Any] | None]
_HANDLERS: dict[str, JobHandler] = {}
_KIND_QUEUE: dict[str, str] = {}
_SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {}


def register_job_kind(kind: str, *, queue: str = LIGHT, summary: Callable[[dict[str, Any]], str] | None = None
                      ) -> Callable[[JobHandler], JobHandler]:
    """Decorator: register a handler for ``kind`` on the ``light`` or ``heavy`` queue; ``summary`` writes the line
    a succeeded job leaves in the Jobs list from its answer (see :func:`job_summary`)."""
    if queue not in QUEUES:
        raise ValueError(f"queue must be one of {QUEUES}, got {queue!r}")

    def decorator(fn: JobHandler) -> JobHandler:
        if kind in _HANDLERS:
            raise ValueError(f"job kind {kind!r} is already registered")
        _HANDLERS[kind] = fn
        _KIND_QUEUE[kind] = queue
        if summary is not None:
            _SUMMARIES[kind] = summary
        return fn

    return decorator


def job_summary(kind: str, result: Any) -> str:
    """The line a succeeded job leaves in the Jobs list: its kind's words for its answer, else the answer's own
    ``summary``, else a refusal's one sentence, else "done"."""
    if not isinstance(result, dict):
        return "done"
    words = _SUMMARIES.get(kind)
    if words is not None:
        try:
            return words(result)
        except (KeyError, TypeError, ValueError):  # an answer of another shape: the generic line, not a failed job
            pass
    if "summary" in result:
        return str(result["summary"])
    if result.get("refused"):
        return f"refused: {result.get('reason') or 'no reason given'}"
    return "done"


def load_extra_job_kinds() -> None:
    """Import the modules named in ``$ROSETTE_JOB_KINDS`` so that their kinds register (once: imports are cached).
    A name that cannot be imported is an error that says which."""
    for name in filter(None, (n.strip() for n in os.environ.get(EXTRA_KINDS_ENV, "").split(","))):
        try:
            importlib.import_module(name)  # a plugin named at run time: cannot be a top-level import
        except ImportError as exc:
            raise ImportError(f"{EXTRA_KINDS_ENV} names {name!r}, which cannot be imported: {exc}") from exc
