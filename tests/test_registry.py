from __future__ import annotations

import pytest

from core.registry import Registry, UnknownComponentError


def test_register_create_list_and_prefix_entries():
    reg: Registry[tuple] = Registry("widget")

    @reg.register("plain", description="a plain widget")
    def plain(*, size: int = 1):
        return ("plain", size)

    @reg.register("pre:")
    def prefixed(rest: str, *, size: int = 1):
        return ("pre", rest, size)

    assert reg.names() == ["plain", "pre:"]
    assert reg.create("plain", size=3) == ("plain", 3)
    assert reg.create("pre:abc/def", size=2) == ("pre", "abc/def", 2)
    assert "pre:x" in reg and "pre:" not in reg and "nope" not in reg
    assert reg.describe()["plain"] == "a plain widget"


def test_unknown_and_duplicate_names_raise_clearly():
    reg: Registry[int] = Registry("gadget")
    reg.register("a")(lambda: 1)
    with pytest.raises(UnknownComponentError, match="unknown gadget 'b'; available: a"):
        reg.create("b")
    with pytest.raises(ValueError):  # curator-facing code catches ValueError
        reg.create("b")
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a")(lambda: 2)
