"""Requests of the model actions (``jobs.actions.models``, ``jobs.actions.promote``): promote a model to active
for a species, archive one, compare two on a benchmark, retrain from the decisions made since the active model."""

from __future__ import annotations

from dataclasses import dataclass

from core.requests import Request
from jobs.requests._values import settle


def _names(value: object) -> tuple[str, ...]:
    """Model names: one name, "A1,A2" (one per training seed) or a sequence of names."""
    if value is None or isinstance(value, str):
        parts = (value or "").split(",")
    else:
        parts = [str(v) for v in value]  # type: ignore[union-attr]
    return tuple(p.strip() for p in parts if p.strip())


@dataclass(frozen=True)
class PromoteRequest(Request):
    """Make ``model`` the active model of ``species`` (a name or number; None: the default species)."""

    model: str
    user: str
    species: str | int | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("Choose a model to promote.")
        settle(self, species=self.species if self.species != "" else None)


@dataclass(frozen=True)
class ArchiveRequest(Request):
    """Hide ``model`` from the pickers (its evaluations are kept)."""

    model: str
    user: str

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("Choose a model to archive.")


@dataclass(frozen=True)
class CompareRequest(Request):
    """Paired statistics between model A and model B on ``benchmark``'s test split. ``a`` and ``b`` are one
    model each, or one model per training seed ("A1,A2" is read as two)."""

    a: tuple[str, ...]
    b: tuple[str, ...]
    benchmark: str
    alpha: float = 0.05

    def __post_init__(self) -> None:
        settle(self, a=_names(self.a), b=_names(self.b))
        if not (self.a and self.b and self.benchmark):
            raise ValueError("Choose two models and a benchmark.")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0.0 < self.alpha < 1.0:
            raise ValueError(f"the significance level must be between 0 and 1, got {self.alpha!r}")
        settle(self, alpha=float(self.alpha))


@dataclass(frozen=True)
class RetrainRequest(Request):
    """Train on the identities confirmed since the species' active model was trained, evaluate, diagnose and
    compare with it (``force``: even with none confirmed since)."""

    user: str
    species: str | int | None = None
    force: bool = False

    def __post_init__(self) -> None:
        settle(self, species=self.species if self.species != "" else None)
