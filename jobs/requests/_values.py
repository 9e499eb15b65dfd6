"""Small checks the requests share: photo and individual numbers as whole numbers, lists of them as tuples."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def as_id(value: Any, what: str) -> int:
    """``value`` as a whole number (a dropdown may hand one over as text); plain words otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"the {what} must be a number, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"the {what} must be a number, got {value!r}") from None


def optional_id(value: Any, what: str) -> int | None:
    """``as_id``, keeping None (nothing chosen: the action says what to choose)."""
    return None if value is None else as_id(value, what)


def as_ids(values: Iterable[Any] | None, what: str) -> tuple[int, ...]:
    """Every chosen number, in order, as a tuple (None: none chosen)."""
    return tuple(as_id(v, what) for v in (values or ()))


def settle(request: Any, **values: Any) -> None:
    """Set normalised field values on a frozen request from its ``__post_init__``."""
    for name, value in values.items():
        object.__setattr__(request, name, value)
