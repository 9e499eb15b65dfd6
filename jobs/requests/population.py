"""Requests of the population answers: the estimates (``rosette population``, the Population tab) and the
capture-history files for secr, camtrapR and MARK (``rosette export capthist``, the tab's download)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

from core.requests import Request
from jobs.requests._values import settle

MAX_OCCASION_DAYS = 366.0


def occasion_length(value: object) -> float:
    """Days per occasion as a positive number up to a year; plain words otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"the occasion length must be a number of days, got {value!r}")
    try:
        days = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"the occasion length must be a number of days, got {value!r}") from None
    if not math.isfinite(days) or days <= 0 or days > MAX_OCCASION_DAYS:
        raise ValueError(f"the occasion length must be more than 0 and at most {MAX_OCCASION_DAYS:g} days, "
                         f"got {value!r}")
    return days


def optional_day(value: object, what: str) -> str | None:
    """A calendar day as ISO text (YYYY-MM-DD), None when empty."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, date):
        return value.isoformat()[:10]
    try:
        return date.fromisoformat(str(value).strip()).isoformat()
    except ValueError:
        raise ValueError(f"the {what} must be a day written YYYY-MM-DD, got {value!r}") from None


def optional_species(value: object) -> str | None:
    text = " ".join(str(value).split()) if value is not None else ""
    return text or None


@dataclass(frozen=True)
class PopulationRequest(Request):
    """Estimate the size of a species' population from its identified detections at the camera stations.

    ``species`` None: the one species with individuals; ``occasion_days``: the length of an occasion;
    ``date_from``/``date_to``: the study window (days, inclusive; None: the deployments' whole span)."""

    species: str | None = None
    occasion_days: float = 1.0
    date_from: str | None = None
    date_to: str | None = None

    def __post_init__(self) -> None:
        settle(self, species=optional_species(self.species), occasion_days=occasion_length(self.occasion_days),
               date_from=optional_day(self.date_from, "first day"), date_to=optional_day(self.date_to, "last day"))
        if self.date_from and self.date_to and self.date_to < self.date_from:
            raise ValueError(f"the last day ({self.date_to}) is before the first day ({self.date_from})")

    @property
    def first_day(self) -> date | None:
        return date.fromisoformat(self.date_from) if self.date_from else None

    @property
    def last_day(self) -> date | None:
        return date.fromisoformat(self.date_to) if self.date_to else None


@dataclass(frozen=True)
class CapthistExportRequest(PopulationRequest):
    """Write the capture histories of a :class:`PopulationRequest` for secr (captures, traps with usage),
    camtrapR (record table) and MARK (.inp) into the folder ``out`` (None: a new folder under the data directory's
    exports), with a README; ``binary_usage``: secr usage
    as 0/1 codes instead of active days; ``as_zip``: also pack them into ``out``.zip (the tab's download)."""

    out: str | None = None
    binary_usage: bool = False
    as_zip: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        settle(self, out=str(self.out).strip() or None if self.out is not None else None)
