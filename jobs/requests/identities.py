"""Requests of the population answers with identification uncertainty: the estimates on a chosen basis
(``rosette population --identities``) and the reviews that would narrow them most (``rosette review-priority``)."""

from __future__ import annotations

from dataclasses import dataclass

from core.field.identities import BASES, DEFAULT_DRAWS, check_draws
from jobs.requests._values import settle
from jobs.requests.population import PopulationRequest

MAX_TOP = 1000


def identity_basis(value: object) -> str:
    """decided, confirmed or uncertain; plain words otherwise."""
    text = str(value or "decided").strip().lower()
    if text not in BASES:
        raise ValueError(f"the identities must be one of {', '.join(BASES)}, got {value!r}")
    return text


def whole_number(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"the {what} must be a whole number, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"the {what} must be a whole number, got {value!r}") from None
    if number != int(number):
        raise ValueError(f"the {what} must be a whole number, got {value!r}")
    return int(number)


@dataclass(frozen=True)
class PopulationIdentitiesRequest(PopulationRequest):
    """A :class:`PopulationRequest` on a basis of identities: ``decided`` (every assigned annotation as assigned,
    the answer without this request), ``confirmed`` (curator identities only) or ``uncertain`` (the identities
    nobody confirmed imputed ``draws`` times from ``seed``)."""

    identities: str = "decided"
    draws: int = DEFAULT_DRAWS
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        settle(self, identities=identity_basis(self.identities), draws=check_draws(self.draws),
               seed=whole_number(self.seed, "seed"))
        if self.seed < 0:
            raise ValueError(f"the seed must be 0 or more, got {self.seed}")


@dataclass(frozen=True)
class ReviewPriorityRequest(PopulationIdentitiesRequest):
    """The ``top`` unreviewed and machine annotations whose review is expected to narrow the ``uncertain``
    interval of Mh-Chao most."""

    identities: str = "uncertain"
    top: int = 20

    def __post_init__(self) -> None:
        super().__post_init__()
        settle(self, top=whole_number(self.top, "number of annotations listed"))
        if not 1 <= self.top <= MAX_TOP:
            raise ValueError(f"the number of annotations listed must be from 1 to {MAX_TOP}, got {self.top}")
