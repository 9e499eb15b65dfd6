"""The typed requests of the service layer (``jobs.actions``), one module per area.

Each request is a frozen dataclass built on :class:`core.requests.Request`: validated when made, stored by a job as
``to_dict()`` and rebuilt by the worker with ``from_dict()`` (unknown keys and wrong types refused).

These modules import core and, for the vocabulary, ``db.models``; never ``jobs.actions`` or ``jobs.kinds``, which
both import them."""
