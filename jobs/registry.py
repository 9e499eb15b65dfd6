"""The job kinds: a handler per kind, registered with its queue (``light`` for short work, ``heavy`` for
training, embedding and evaluation). ``jobs.kinds`` registers the built-in ones; tests register their own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from db.session import Catalogue

if TYPE_CHECKING:  # only for the handler's signature
    from jobs.context import JobContext

LIGHT, HEAVY = "light", "heavy"
QUEUES = (LIGHT, HEAVY)

JobHandler = Callable[[Catalogue, dict[str, Any], "JobContext"], dict[str, Any] | None]
_HANDLERS: dict[str, JobHandler] = {}
_KIND_QUEUE: dict[str, str] = {}


def register_job_kind(kind: str, *, queue: str = LIGHT) -> Callable[[JobHandler], JobHandler]:
    """Decorator: register a handler for ``kind`` on the ``light`` or ``heavy`` queue."""
    if queue not in QUEUES:
        raise ValueError(f"queue must be one of {QUEUES}, got {queue!r}")

    def decorator(fn: JobHandler) -> JobHandler:
        if kind in _HANDLERS:
            raise ValueError(f"job kind {kind!r} is already registered")
        _HANDLERS[kind] = fn
        _KIND_QUEUE[kind] = queue
        return fn

    return decorator
