"""core.requests: a stored request comes back equal, and bad stored params are refused with the field named."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from core.requests import Request, RequestError


@dataclass(frozen=True)
class Example(Request):
    name: str
    count: int = 1
    ids: tuple[int, ...] = ()
    weight: float = 0.5
    note: str | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("count must be at least 1")


def test_a_request_survives_storing():
    req = Example("a", 2, (3, 1), 1.0, None)
    stored = req.to_dict()
    assert stored == {"name": "a", "count": 2, "ids": [3, 1], "weight": 1.0, "note": None}
    assert Example.from_dict(stored) == req
    assert Example.from_dict({"name": "b"}) == Example("b")


@pytest.mark.parametrize(("params", "words"), [
    ({"name": "a", "colour": "red"}, "unknown field(s) 'colour'"),
    ({"name": 3}, "'name'"),
    ({"name": "a", "count": "2"}, "'count'"),
    ({"name": "a", "count": True}, "'count'"),
    ({"name": "a", "ids": [1, "x"]}, "'ids.1'"),
    ({}, "'name' is missing"),
])
def test_bad_stored_params_are_refused_naming_the_field(params, words):
    with pytest.raises(RequestError) as err:
        Example.from_dict(params)
    assert words in str(err.value)


def test_value_checks_run_when_rebuilt_and_when_made():
    with pytest.raises(ValueError, match="count must be at least 1"):
        Example.from_dict({"name": "a", "count": 0})
    with pytest.raises(ValueError, match="count must be at least 1"):
        Example("a", 0)
