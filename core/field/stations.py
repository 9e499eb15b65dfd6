"""Camera stations: deployments, their active periods, timestamps in local time, and events (docs/DESIGN.md §8).

Pure functions over dataclasses and datetimes; :mod:`db.records.deployments` stores what they check.

- A deployment is one camera at one location for one active period ``[start, end]`` (Camtrap DP
  ``deployments``); a location with a gap is several deployments sharing its ``location_id``.
- Times are ISO 8601 with a UTC offset, the deployment's local time. A timestamp written without an offset takes
  its deployment's offset (:func:`parse_timestamp` says so, for the import to warn).
- Photos of one deployment within ``gap_s`` (60 s) of the previous one form one event (:func:`group_events`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

#: Photos of one deployment closer than this to the previous photo are one event (a sighting).
EVENT_GAP_S = 60.0

#: The Camtrap DP deployment fields Rosette keeps in columns; the others travel in ``details``.
DEPLOYMENT_COLUMNS = ("deploymentID", "locationID", "locationName", "latitude", "longitude", "deploymentStart",
                      "deploymentEnd", "cameraID", "cameraModel")


class StationError(ValueError):
    """A deployment or timestamp a curator must fix; the message names it."""


@dataclass(frozen=True)
class ParsedTime:
    """A timestamp as an aware datetime, and whether its offset was borrowed from the deployment."""

    when: datetime
    offset_assumed: bool = False

    def iso(self) -> str:
        return self.when.isoformat()


def parse_timestamp(text: str | datetime | date, *, default_offset: timedelta | None = None,
                    what: str = "timestamp") -> ParsedTime:
    """Parse an ISO 8601 date-time (``2024-05-01T12:00:00-04:00``, ``...Z``, EXIF's ``2024:05:01 12:00:00``).

    Without an offset the time is taken to be in ``default_offset`` (the deployment's local time) and
    ``offset_assumed`` is set; without either it is refused.
    """
    if isinstance(text, datetime):
        parsed = text
    elif isinstance(text, date):
        parsed = datetime(text.year, text.month, text.day)
    else:
        raw = str(text).strip()
        if not raw:
            raise StationError(f"{what}: empty")
        if len(raw) >= 19 and raw[4] == ":" and raw[7] == ":":  # EXIF DateTimeOriginal
            raw = raw[:4] + "-" + raw[5:7] + "-" + raw[8:]
        if raw.endswith("Z"):
            raw = raw[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(raw.replace(" ", "T", 1) if len(raw) > 10 else raw)
        except ValueError:
            raise StationError(f"{what} {text!r} is not an ISO 8601 date-time (like 2024-05-01T12:00:00-04:00)") \
                from None
    if parsed.tzinfo is not None:
        return ParsedTime(parsed)
    if default_offset is None:
        raise StationError(f"{what} {text!r} has no time zone and there is no deployment time zone to take")
    return ParsedTime(parsed.replace(tzinfo=timezone(default_offset)), offset_assumed=True)


def station_name(location_id: str | None, location_name: str | None, deployment_id: str) -> str:
    """The station a deployment belongs to: its location id, else its location name, else its own id. Deployments
    of one station (a camera down for some days) are one detector, and one place on an individual's map."""
    return location_id or location_name or deployment_id


@dataclass(frozen=True)
class DeploymentSpec:
    """One deployment as a curator or a Camtrap DP package states it (validated when made)."""

    key: str
    start: datetime
    end: datetime
    location_id: str | None = None
    location_name: str | None = None
    lat: float | None = None
    lon: float | None = None
    camera_id: str | None = None
    camera_model: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not str(self.key or "").strip():
            raise StationError("a deployment needs an id (deploymentID)")
        if len(self.key) > 200:
            raise StationError(f"deployment id {self.key[:40]!r}...: longer than 200 characters")
        for name in ("start", "end"):
            value = getattr(self, name)
            if not isinstance(value, datetime) or value.tzinfo is None:
                raise StationError(f"deployment {self.key!r}: {name} needs a date-time with a time zone")
        if self.end < self.start:
            raise StationError(f"deployment {self.key!r}: it ends ({self.end.isoformat()}) before it starts "
                               f"({self.start.isoformat()})")
        if (self.lat is None) != (self.lon is None):
            raise StationError(f"deployment {self.key!r}: give both latitude and longitude, or neither")
        if self.lat is not None:
            if not (math.isfinite(self.lat) and -90 <= self.lat <= 90):
                raise StationError(f"deployment {self.key!r}: latitude {self.lat} is outside -90..90")
            if not (math.isfinite(self.lon) and -180 <= self.lon <= 180):
                raise StationError(f"deployment {self.key!r}: longitude {self.lon} is outside -180..180")

    @property
    def offset(self) -> timedelta:
        """The deployment's UTC offset (its local time)."""
        return self.start.utcoffset() or timedelta(0)

    @property
    def location(self) -> str:
        """What names the station: its location id, else its name, else the deployment id."""
        return station_name(self.location_id, self.location_name, self.key)

    @property
    def has_coordinates(self) -> bool:
        return self.lat is not None and self.lon is not None

    def active_at(self, when: datetime) -> bool:
        return self.start <= when <= self.end


def deployment_spec(row: Mapping[str, Any], *, what: str = "deployment") -> DeploymentSpec:
    """A :class:`DeploymentSpec` from a Camtrap DP ``deployments`` row (also the deployments CSV's columns).

    Empty cells are missing values; fields Rosette has no column for are kept in ``details``.
    """
    def get(name: str) -> str | None:
        value = row.get(name)
        if value is None:
            return None
        value = str(value).strip()
        return value or None

    key = get("deploymentID")
    if key is None:
        raise StationError(f"{what}: no deploymentID")
    start_text, end_text = get("deploymentStart"), get("deploymentEnd")
    if start_text is None or end_text is None:
        raise StationError(f"deployment {key!r}: deploymentStart and deploymentEnd are required")
    start = parse_timestamp(start_text, what=f"deployment {key!r} deploymentStart").when
    end = parse_timestamp(end_text, default_offset=start.utcoffset(), what=f"deployment {key!r} deploymentEnd").when

    def number(name: str) -> float | None:
        text = get(name)
        if text is None:
            return None
        try:
            return float(text)
        except ValueError:
            raise StationError(f"deployment {key!r}: {name} {text!r} is not a number") from None

    details = {k: v for k, v in row.items() if k not in DEPLOYMENT_COLUMNS and v not in (None, "")}
    return DeploymentSpec(key=key, start=start, end=end, location_id=get("locationID"),
                          location_name=get("locationName"), lat=number("latitude"), lon=number("longitude"),
                          camera_id=get("cameraID"), camera_model=get("cameraModel"), details=details)


def check_unique_ids(ids: Sequence[str], *, what: str) -> None:
    """Refuse duplicate ids, naming them and how often each appears."""
    seen: dict[str, int] = {}
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
    dupes = {k: n for k, n in seen.items() if n > 1}
    if dupes:
        shown = ", ".join(f"{k!r} ({n}x)" for k, n in list(dupes.items())[:10])
        more = f" and {len(dupes) - 10} more" if len(dupes) > 10 else ""
        raise StationError(f"duplicate {what}: {shown}{more}")


def deployment_at(deployments: Sequence[DeploymentSpec], when: datetime) -> DeploymentSpec | None:
    """The deployment active at ``when`` among ``deployments`` (one station's), or None."""
    for d in deployments:
        if d.active_at(when):
            return d
    return None


def group_events(times: Sequence[datetime], *, gap_s: float = EVENT_GAP_S) -> list[int]:
    """Event number per photo of one deployment: a photo more than ``gap_s`` after the previous one (in time
    order) starts a new event. Numbers count from 0 in time order; the input order does not matter."""
    if not gap_s >= 0:  # also refuses NaN, which no comparison would ever exceed (one event for everything)
        raise StationError(f"the event gap must be at least 0 s (got {gap_s})")
    order = sorted(range(len(times)), key=lambda i: times[i])
    events = [0] * len(times)
    current = -1
    previous: datetime | None = None
    for i in order:
        if previous is None or (times[i] - previous).total_seconds() > gap_s:
            current += 1
        events[i] = current
        previous = times[i]
    return events


def active_days(start: datetime, end: datetime) -> list[date]:
    """The local calendar days a deployment was active on (start and end days included), in the deployment's local
    time: its start's UTC offset (:attr:`DeploymentSpec.offset`, the offset its photos' times are put in), whatever
    offset the end was written with."""
    if start.tzinfo is not None and end.tzinfo is not None:
        end = end.astimezone(start.tzinfo)  # an end written in UTC ("...Z") is the same instant, in local time
    first, last = start.date(), end.date()
    return [first + timedelta(days=k) for k in range((last - first).days + 1)]


def local_period(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """A deployment's active period as naive wall-clock times of its local time (its start's UTC offset), the end
    read in that offset whatever offset it was written with. The population study's effort and the Deployments
    screen's camera-days both come from it."""
    if start.tzinfo is not None and end.tzinfo is not None:
        end = end.astimezone(start.tzinfo)
    return start.replace(tzinfo=None), end.replace(tzinfo=None)


def camera_days(start: datetime, end: datetime) -> float:
    """A deployment's effort in camera-days: the length of its active period in days, fractions kept (a camera set
    at noon on 1 May and taken at noon on 11 May worked 10 days, though it was out on 11 calendar days). This is
    camtrapR's rule when setup and retrieval times are known (cameraOperation counts the first and last day by the
    fraction of the day the camera ran) and secr's usage summed over the occasions."""
    begin, finish = local_period(start, end)
    return (finish - begin) / timedelta(days=1)
