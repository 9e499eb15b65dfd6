"""Name -> factory registries for interchangeable parts (backbones, heads, maskers, inpainters).

Modelled on timm's ``register_model`` / ``create_model``: a factory is registered
under a name, looked up by name, listed, and an unknown name raises a clear error
that lists what is available. The registry name is what the database stores.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class UnknownComponentError(KeyError, ValueError):
    """Raised when a registry is asked for a name it does not hold (a KeyError and a ValueError, so
    callers that show ValueError messages to curators show this one too)."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class Registry(Generic[T]):
    """A named family of factories, e.g. ``Registry("backbone")``.

    Names may be exact (``"efficientnet_lite0"``) or prefixes ending in ``:``
    (``"timm:"``), in which case the factory receives the rest of the name as
    its first argument (``create("timm:resnet18")`` calls ``factory("resnet18")``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._factories: dict[str, Callable[..., T]] = {}
        self._descriptions: dict[str, str] = {}

    def register(self, name: str, *, description: str = "") -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator: register ``factory`` under ``name`` (raises on duplicates)."""

        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._factories[name] = factory
            self._descriptions[name] = description or (factory.__doc__ or "").strip().split("\n")[0]
            return factory

        return decorator

    def names(self) -> list[str]:
        """Registered names, sorted (prefix entries end in ``:``)."""
        return sorted(self._factories)

    def describe(self) -> dict[str, str]:
        """Name -> one-line description."""
        return {n: self._descriptions[n] for n in self.names()}

    def resolve(self, name: str) -> tuple[Callable[..., T], str | None]:
        """Return (factory, suffix) for ``name``; suffix is set for prefix entries."""
        if name in self._factories and not name.endswith(":"):
            return self._factories[name], None
        for key, factory in self._factories.items():
            if key.endswith(":") and name.startswith(key) and len(name) > len(key):
                return factory, name[len(key):]
        raise UnknownComponentError(
            f"unknown {self.kind} {name!r}; available: {', '.join(self.names()) or '(none)'}"
        )

    def __contains__(self, name: str) -> bool:
        try:
            self.resolve(name)
        except UnknownComponentError:
            return False
        return True

    def create(self, name: str, /, **options: object) -> T:
        """Build the component registered under ``name`` with keyword ``options``."""
        factory, suffix = self.resolve(name)
        if suffix is not None:
            return factory(suffix, **options)
        return factory(**options)
