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
from typing import Any, Self

from pydantic import TypeAdapter, ValidationError


class RequestError(ValueError):
    """A request could not be rebuilt from stored params: an unknown key or a value of the wrong type."""


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def _message(cls: type, error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or cls.__name__
        if item["type"] == "extra_forbidden":
            parts.append(f"unknown field {where!r}")
        elif item["type"] == "missing":
            parts.append(f"{where!r} is missing")
        else:
            parts.append(f"{where!r}: {item['msg'].lower()} (got {item.get('input')!r})")
    return f"{cls.__name__}: " + "; ".join(parts)


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
        try:
            return _adapter(cls).validate_json(json.dumps(dict(data)), strict=True)
        except ValidationError as exc:
            # a value check in __post_init__ surfaces as a ValidationError of type value_error: keep its words
            values = [e for e in exc.errors() if e["type"] == "value_error"]
            if values and len(values) == len(exc.errors()):
                raise ValueError(str(values[0]["ctx"]["error"])) from None
            raise RequestError(_message(cls, exc)) from None
