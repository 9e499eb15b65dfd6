"""Typed requests: what a person asks an action to do, as a frozen dataclass validated when it is made.

Every action of the service layer (``jobs.actions``) takes one request. A job stores ``request.to_dict()`` (plain
JSON) and the worker rebuilds the request with ``Cls.from_dict(params)``: unknown keys and values of the wrong type
are refused there with a message naming the field, before any work starts. The type check is pydantic's strict JSON
mode over the dataclass's own annotations (lists come back as tuples, whole numbers as floats, nothing else is
coerced); the request's ``__post_init__`` then checks the values themselves.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Self, TypeVar

if TYPE_CHECKING:
    from pydantic import TypeAdapter, ValidationError

T = TypeVar("T")


class RequestError(ValueError):
    """A request could not be rebuilt from stored params: an unknown key or a value of the wrong type."""


@cache
def _adapter(cls: type) -> TypeAdapter:
    from pydantic import TypeAdapter  # lazy: ~0.1 s to import, needed only when a stored request is rebuilt

    return TypeAdapter(cls)


def _message(label: str, error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or label
        if item["type"] == "extra_forbidden":
            parts.append(f"unknown field {where!r}")
        elif item["type"] == "missing":
            parts.append(f"{where!r} is missing")
        else:
            parts.append(f"{where!r}: {item['msg'].lower()} (got {item.get('input')!r})")
    return f"{label}: " + "; ".join(parts)


def rebuild(cls: type[T], data: Mapping[str, Any], *, label: str | None = None) -> T:
    """The dataclass ``cls`` made from stored ``data`` with its annotations checked strictly (pydantic's JSON mode):
    a wrongly typed value raises :class:`RequestError` naming the field (after ``label``, default the class name),
    and the class's own checks (``__post_init__``) raise ``ValueError`` in their words. Unknown keys are the
    caller's to refuse (with the names it knows)."""
    from pydantic import ValidationError  # lazy, as in _adapter

    try:
        return _adapter(cls).validate_json(json.dumps(dict(data)), strict=True)
    except ValidationError as exc:
        # a value check in __post_init__ surfaces as a ValidationError of type value_error: keep its words
        values = [e for e in exc.errors() if e["type"] == "value_error"]
        if values and len(values) == len(exc.errors()):
            raise ValueError(str(values[0]["ctx"]["error"])) from None
        raise RequestError(_message(label or cls.__name__, exc)) from None


class Request:
    """Mixin for a request dataclass: ``to_dict`` for storing, ``from_dict`` for rebuilding with type checks."""

    def to_dict(self) -> dict[str, Any]:
        """The request as JSON-ready values (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The request stored as ``data``; unknown keys and wrongly typed values raise :class:`RequestError`, and
        the request's own checks (``__post_init__``) raise ``ValueError``."""
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"{cls.__name__} is not a dataclass")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RequestError(f"{cls.__name__}: unknown field(s) {', '.join(map(repr, unknown))}; "
                               f"known: {', '.join(sorted(known))}")
        return rebuild(cls, data)
