"""What every action shares: who a change is attributed to, and an upload as a path."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from db.audit import acting_as, known_actor


def curator_name(user: str | None) -> str:
    """The name a change is attributed to; refuses an empty one so no change goes unattributed."""
    # inside a guarded handler (or a CLI command) the acting user is already known: it wins over any argument
    name = (known_actor() or user or "").strip()
    if not name:
        raise ValueError("No one is signed in, so the change could not be attributed to anyone; sign in first.")
    return name[:120]


def upload_path(f: object) -> str:
    """A Gradio upload as a path (strings, ``NamedString`` or objects with ``.name``/``.path``)."""
    if isinstance(f, (str, Path)):
        return str(f)
    for attr in ("path", "name"):
        value = getattr(f, attr, None)
        if isinstance(value, str):
            return value
    raise ValueError(f"cannot read the upload {f!r}")


def upload_name(f: object) -> str | None:
    """The file name an upload had on the curator's machine, when the upload says (Gradio's ``orig_name``)."""
    name = getattr(f, "orig_name", None)
    return name if isinstance(name, str) else None


@contextmanager
def attributed(user: str | None) -> Iterator[None]:
    """Changes made inside are audited under the signed-in person when one is known, else under ``user``."""
    with acting_as(known_actor() or user):
        yield
