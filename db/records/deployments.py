"""Camera stations in the store: deployments (list, add, edit, delete, store many at once), which deployment a
photo belongs to, when it was taken, and its events (docs/DESIGN.md section 8).

- :func:`store_deployments` stores deployments a CSV or a Camtrap DP package states: new ones are added, ones
  stored the same already are left alone, and ones stored *differently* are reported as conflicts and never
  overwritten (the curator edits them in the Deployments screen). Every change is audited (``deployment.*``).
- :class:`DeploymentIndex` answers which deployment a photo belongs to: ``Entry.deployment`` names a deployment
  by its id (Camtrap DP ``deploymentID``), or a station (its ``locationID`` or ``locationName``, as the
  ``Station/...`` folder layout does): then the deployment of that station active at the photo's time is chosen.
  A photo taken outside every active period is imported without a deployment, and the report says why.
- :func:`photo_time` gives a photo's ``taken_at`` (ISO 8601 with offset) from the time the source gave, else its
  EXIF time, taking the deployment's UTC offset when the time has none (and saying so).
- :func:`form_events` groups photos of one deployment taken within ``gap_s`` (60 s) of each other into one
  sighting (an event). Photos that already have a sighting (a manifest's sighting, a Camtrap DP ``eventID``)
  are never regrouped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timezone
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core.field.stations import (
    EVENT_GAP_S,
    DeploymentSpec,
    ParsedTime,
    StationError,
    camera_days,
    check_unique_ids,
    group_events,
    parse_timestamp,
    station_name,
)
from db.audit import acting_as
from db.catalogue import CatalogueError, NotFoundError, get_or_create_user
from db.models import Deployment, Photo, Sighting
from db.session import Catalogue

#: The stored fields a deployment is compared on (a difference in any of them is a conflict).
COMPARED_FIELDS = ("location_id", "location_name", "lat", "lon", "start", "end", "camera_id", "camera_model",
                   "details")
#: How an automatically formed event's sighting key starts (``event:<deploymentID>:<first photo's time>``).
EVENT_KEY_PREFIX = "event:"


# --------------------------------------------------------------------------- specs <-> rows


def _values(spec: DeploymentSpec) -> dict[str, Any]:
    """The stored column values of ``spec`` (times as ISO 8601 with their offset)."""
    return {"location_id": spec.location_id, "location_name": spec.location_name, "lat": spec.lat, "lon": spec.lon,
            "start": spec.start.isoformat(), "end": spec.end.isoformat(), "camera_id": spec.camera_id,
            "camera_model": spec.camera_model, "details": dict(spec.details) or None}


def spec_of(dep: Deployment) -> DeploymentSpec:
    """The :class:`DeploymentSpec` a stored deployment is."""
    return DeploymentSpec(key=dep.key, start=parse_timestamp(dep.start).when, end=parse_timestamp(dep.end).when,
                          location_id=dep.location_id, location_name=dep.location_name, lat=dep.lat, lon=dep.lon,
                          camera_id=dep.camera_id, camera_model=dep.camera_model, details=dict(dep.details or {}))


def _differences(dep: Deployment, spec: DeploymentSpec) -> dict[str, tuple[Any, Any]]:
    """``{field: (stored, given)}`` for each field ``spec`` states differently from ``dep``."""
    given = _values(spec)
    out: dict[str, tuple[Any, Any]] = {}
    for name in COMPARED_FIELDS:
        stored, new = getattr(dep, name), given[name]
        if name in ("start", "end"):
            same = parse_timestamp(stored).when == parse_timestamp(new).when and \
                parse_timestamp(stored).when.utcoffset() == parse_timestamp(new).when.utcoffset()
        elif name == "details":
            same = {k: str(v) for k, v in (stored or {}).items()} == {k: str(v) for k, v in (new or {}).items()}
        else:
            same = stored == new
        if not same:
            out[name] = (stored, new)
    return out


def _no_coordinates_warning(keys: Sequence[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:10]) + (f" and {len(keys) - 10} more" if len(keys) > 10 else "")
    return (f"{len(keys)} deployment(s) have no coordinates (latitude/longitude): {shown}; they were stored, "
            "but cannot be shown on the map or used where distances matter until coordinates are added")


# --------------------------------------------------------------------------- storing many


@dataclass(frozen=True)
class DeploymentConflict:
    """A deployment id already stored with other values; the stored one was kept."""

    key: str
    fields: dict[str, tuple[Any, Any]]  # field -> (stored, given)

    def describe(self) -> str:
        words = "; ".join(f"{f}: stored {s!r}, given {g!r}" for f, (s, g) in self.fields.items())
        return f"deployment {self.key!r} is already stored differently ({words}); the stored one was kept"


@dataclass(frozen=True)
class DeploymentStoreReport:
    """What :func:`store_deployments` did: ids added, ids already stored the same, conflicts, warnings."""

    new: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicting: list[DeploymentConflict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dry_run: bool = False

    @property
    def ok(self) -> bool:
        return not self.conflicting

    def summary(self) -> str:
        verb = "would add" if self.dry_run else "added"
        return (f"{verb} {len(self.new)} deployment(s), {len(self.unchanged)} already stored the same, "
                f"{len(self.conflicting)} conflicting with what is stored")

    def to_dict(self) -> dict[str, Any]:
        return {"new": list(self.new), "unchanged": list(self.unchanged),
                "conflicting": [{"id": c.key, "message": c.describe(),
                                 "fields": {f: {"stored": s, "given": g} for f, (s, g) in c.fields.items()}}
                                for c in self.conflicting],
                "warnings": list(self.warnings), "dry_run": self.dry_run, "summary": self.summary()}


def store_deployments(target: Catalogue | Session, specs: Sequence[DeploymentSpec], *, user: str,
                      dry_run: bool = False) -> DeploymentStoreReport:
    """Store ``specs`` (from a deployments CSV, a Camtrap DP package or a form) and report what happened.

    - Duplicate ids among ``specs`` refuse the whole lot (:class:`CatalogueError` naming them); nothing is stored.
    - An id not stored yet is added (audited as ``deployment.add`` by ``user``).
    - An id stored with the same values is ``unchanged``; one stored with other values is ``conflicting``: the
      stored one is kept, never overwritten (the report names each differing field, stored and given).
    - Deployments without coordinates are stored, with a warning naming them; two deployments of one location
      whose active periods overlap are stored, with a warning (a photo there is given the first one).

    ``target`` is a :class:`Catalogue` (one transaction, committed here unless ``dry_run``) or a session of a
    caller's unit of work (flushed, not committed: the caller owns the transaction, e.g. a Camtrap DP import).
    """
    try:
        check_unique_ids([s.key for s in specs], what="deployment ids (deploymentID)")
    except StationError as exc:
        raise CatalogueError(f"{exc}; nothing was stored") from None
    if isinstance(target, Session):
        with acting_as(user):
            return _store(target, specs, user=user, dry_run=dry_run)
    with acting_as(user), target.unit_of_work() as s:
        report = _store(s, specs, user=user, dry_run=dry_run)
        if not dry_run:
            s.commit()
        return report


def _store(s: Session, specs: Sequence[DeploymentSpec], *, user: str, dry_run: bool) -> DeploymentStoreReport:
    stored = {d.key: d for d in s.scalars(select(Deployment).where(Deployment.key.in_([sp.key for sp in specs])))}
    new: list[str] = []
    unchanged: list[str] = []
    conflicts: list[DeploymentConflict] = []
    for spec in specs:
        dep = stored.get(spec.key)
        if dep is None:
            new.append(spec.key)
            if not dry_run:
                s.add(Deployment(key=spec.key, **_values(spec)))
        elif diff := _differences(dep, spec):
            conflicts.append(DeploymentConflict(spec.key, diff))
        else:
            unchanged.append(spec.key)
    warnings: list[str] = []
    missing = [sp.key for sp in specs if sp.key in new and not sp.has_coordinates]
    if missing:
        warnings.append(_no_coordinates_warning(missing))
    if new and not dry_run:
        get_or_create_user(s, user)
        s.flush()
    warnings.extend(_overlaps(s, [sp for sp in specs if sp.key in new]))
    return DeploymentStoreReport(new, unchanged, conflicts, warnings, dry_run)


def _overlaps(s: Session, specs: Sequence[DeploymentSpec]) -> list[str]:
    """A warning for each pair of one location's deployments (stored or in ``specs``) active at the same time."""
    by_location: dict[str, dict[str, DeploymentSpec]] = {}
    for dep in s.scalars(select(Deployment)):
        sp = spec_of(dep)
        by_location.setdefault(sp.location, {})[sp.key] = sp
    for sp in specs:
        by_location.setdefault(sp.location, {})[sp.key] = sp
    touched = {sp.key for sp in specs}
    out = []
    for location, deps in by_location.items():
        ordered = sorted(deps.values(), key=lambda d: d.start)
        for a, b in zip(ordered, ordered[1:]):
            if b.start <= a.end and (a.key in touched or b.key in touched):
                out.append(f"station {location!r}: deployments {a.key!r} and {b.key!r} overlap "
                           f"({b.start.isoformat()} is before {a.end.isoformat()}); a photo taken then is given "
                           f"{a.key!r}")
    return out


# --------------------------------------------------------------------------- one at a time (the Deployments screen)


@dataclass(frozen=True)
class DeploymentRow:
    """One deployment as the Deployments screen and ``rosette deployments`` list it.

    ``photos`` counts the photos linked to it; ``active_days`` its camera-days, the length of its active period in
    days, fractions kept (:func:`core.field.stations.camera_days`, the rule the population study's effort follows; lists
    show it to two decimals)."""

    id: int
    key: str
    location_id: str | None
    location_name: str | None
    lat: float | None
    lon: float | None
    start: str
    end: str
    camera_id: str | None
    camera_model: str | None
    photos: int
    active_days: float
    details: dict[str, Any]

    @property
    def station(self) -> str:
        """The station it belongs to (:func:`core.field.stations.station_name`)."""
        return station_name(self.location_id, self.location_name, self.key)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "deploymentID": self.key, "locationID": self.location_id,
                "locationName": self.location_name, "latitude": self.lat, "longitude": self.lon,
                "deploymentStart": self.start, "deploymentEnd": self.end, "cameraID": self.camera_id,
                "cameraModel": self.camera_model, "photos": self.photos, "active_days": round(self.active_days, 2),
                "details": dict(self.details)}


def list_deployments(cat: Catalogue) -> list[DeploymentRow]:
    """Every deployment, by station then start, with its photo count and active days."""
    with cat.unit_of_work() as s:
        counts = dict(s.execute(select(Photo.deployment_id, func.count(Photo.id))
                                .where(Photo.deployment_id.is_not(None)).group_by(Photo.deployment_id)).all())
        rows = []
        for d in s.scalars(select(Deployment)):
            sp = spec_of(d)
            rows.append(DeploymentRow(d.id, d.key, d.location_id, d.location_name, d.lat, d.lon, d.start, d.end,
                                      d.camera_id, d.camera_model, int(counts.get(d.id, 0)),
                                      camera_days(sp.start, sp.end), dict(d.details or {})))
    return sorted(rows, key=lambda r: (r.station, r.start, r.key))


def _find(s: Session, key: str) -> Deployment:
    dep = s.scalar(select(Deployment).where(Deployment.key == key))
    if dep is None:
        known = ", ".join(repr(k) for k in s.scalars(select(Deployment.key).order_by(Deployment.key).limit(20)))
        raise NotFoundError(f"no deployment {key!r}; known: {known or 'none yet'}")
    return dep


def add_deployment(cat: Catalogue, spec: DeploymentSpec, *, user: str) -> DeploymentStoreReport:
    """A curator adds one deployment; an id already stored is refused (edit that one instead)."""
    with acting_as(user), cat.unit_of_work() as s:
        if s.scalar(select(Deployment.id).where(Deployment.key == spec.key)) is not None:
            raise CatalogueError(f"a deployment {spec.key!r} exists already; edit it, or give the new one another id")
        report = _store(s, [spec], user=user, dry_run=False)
        s.commit()
        return report


def edit_deployment(cat: Catalogue, key: str, spec: DeploymentSpec, *, user: str) -> list[str]:
    """A curator changes deployment ``key`` to ``spec`` (which may rename it); audited field by field. The other
    Camtrap DP fields stored (``details``) stay unless ``spec`` states some.

    Refused when the new id names another deployment, or when photos linked to it would fall outside its new
    active period (their link would no longer hold; the message names some). Returns warnings."""
    with acting_as(user), cat.unit_of_work() as s:
        dep = _find(s, key)
        if spec.key != key and s.scalar(select(Deployment.id).where(Deployment.key == spec.key)) is not None:
            raise CatalogueError(f"another deployment is called {spec.key!r}")
        outside = []
        for photo_id, name, taken in s.execute(select(Photo.id, Photo.original_name, Photo.taken_at)
                                               .where(Photo.deployment_id == dep.id, Photo.taken_at.is_not(None))):
            if not spec.active_at(parse_timestamp(taken).when):
                outside.append(f"photo {photo_id} ({name}, taken {taken})")
        if outside:
            raise CatalogueError(f"deployment {key!r}: {len(outside)} linked photo(s) would fall outside the new "
                                 f"active period {spec.start.isoformat()} to {spec.end.isoformat()}: "
                                 + "; ".join(outside[:5]) + ("; ..." if len(outside) > 5 else ""))
        dep.key = spec.key
        values = _values(spec)
        if not spec.details:  # a form states no other Camtrap DP fields: those stored stay
            values.pop("details")
        for name, value in values.items():
            setattr(dep, name, value)
        get_or_create_user(s, user)
        s.flush()
        warnings = [] if spec.has_coordinates else [_no_coordinates_warning([spec.key])]
        warnings.extend(_overlaps(s, [spec]))
        s.commit()
        return warnings


def delete_deployment(cat: Catalogue, key: str, *, user: str) -> None:
    """A curator deletes a deployment entered by mistake; one with photos or events is refused."""
    with acting_as(user), cat.unit_of_work() as s:
        dep = _find(s, key)
        n_photos = s.scalar(select(func.count(Photo.id)).where(Photo.deployment_id == dep.id)) or 0
        n_events = s.scalar(select(func.count(Sighting.id)).where(Sighting.deployment_id == dep.id)) or 0
        if n_photos or n_events:
            raise CatalogueError(f"deployment {key!r} cannot be deleted: {n_photos} photo(s) and {n_events} "
                                 "event(s) belong to it")
        get_or_create_user(s, user)
        s.delete(dep)
        s.commit()


# --------------------------------------------------------------------------- a photo's deployment and time


@dataclass(frozen=True)
class Resolved:
    """A photo's deployment (None: imported without one), its time, and what the curator should know."""

    deployment_id: int | None
    deployment_key: str | None
    taken_at: str | None
    warnings: tuple[str, ...] = ()


class DeploymentIndex:
    """The stored deployments, by id and by station, to resolve the photos of one import."""

    def __init__(self, session: Session) -> None:
        self.by_key: dict[str, tuple[int, DeploymentSpec]] = {}
        self.by_location: dict[str, list[tuple[int, DeploymentSpec]]] = {}
        for dep in session.scalars(select(Deployment).order_by(Deployment.start)):
            sp = spec_of(dep)
            self.by_key[dep.key] = (dep.id, sp)
            names = {n.strip().lower() for n in (dep.location_id, dep.location_name) if n}
            for name in names:
                self.by_location.setdefault(name, []).append((dep.id, sp))
        for deps in self.by_location.values():
            deps.sort(key=lambda d: d[1].start)

    def __bool__(self) -> bool:
        return bool(self.by_key)

    def is_station(self, name: str) -> bool:
        """Whether ``name`` is a stored station (a locationID or locationName, case ignored)."""
        return name.strip().lower() in self.by_location

    def resolve(self, *, deployment: str | None, taken_at: str | None, exif_time: str | None) -> Resolved:
        """The deployment ``deployment`` names (a deploymentID, else a station whose deployment active at the
        photo's time is chosen) and the photo's ``taken_at`` (``taken_at`` as given, else ``exif_time``)."""
        given = taken_at or exif_time
        source = "timestamp" if taken_at else "EXIF time"
        if not deployment:
            return Resolved(None, None, *_time_alone(given, source))
        name = deployment.strip()
        if name in self.by_key:
            dep_id, spec = self.by_key[name]
            when, warnings = _time_in(spec, given, source)
            if when is not None and not spec.active_at(when.when):
                warnings.append(f"taken {when.iso()}, outside the active period of deployment {name!r} "
                                f"({spec.start.isoformat()} to {spec.end.isoformat()}); linked to it as the source "
                                "says")
            return Resolved(dep_id, name, when.iso() if when else None, tuple(warnings))
        candidates = self.by_location.get(name.lower())
        if not candidates:
            known = ", ".join(repr(k) for k in list(self.by_key)[:10]) or "none are stored yet"
            words = [f"no deployment or station {name!r} is stored (deployments: {known}); imported without a "
                     "deployment"]
            time_iso, more = _time_alone(given, source)
            return Resolved(None, None, time_iso, tuple(words + list(more)))
        if given is None:
            return Resolved(None, None, None, (f"station {name!r}: the photo has no time, so which of its "
                                               f"deployments it belongs to is unknown; imported without a deployment",))
        for dep_id, spec in candidates:
            try:
                when = parse_timestamp(given, default_offset=spec.offset, what=source)
            except StationError as exc:
                return Resolved(None, None, None, (f"{exc}; imported without a deployment",))
            if spec.active_at(when.when):
                warnings = [_assumed(spec, when, source)] if when.offset_assumed else []
                return Resolved(dep_id, spec.key, when.iso(), tuple(warnings))
        periods = ", ".join(f"{sp.key} {sp.start.isoformat()} to {sp.end.isoformat()}" for _, sp in candidates)
        first = candidates[0][1]
        when = parse_timestamp(given, default_offset=first.offset, what=source)
        return Resolved(None, None, when.iso(),
                        (f"taken {when.iso()}, outside every active period of station {name!r} ({periods}); "
                         "imported without a deployment",))


def _assumed(spec: DeploymentSpec, when: ParsedTime, source: str) -> str:
    hours = spec.offset.total_seconds() / 3600
    return (f"the {source} has no time zone: taken to be the local time of deployment {spec.key!r} "
            f"(UTC{hours:+g}), {when.iso()}")


def _time_in(spec: DeploymentSpec, given: str | None, source: str) -> tuple[ParsedTime | None, list[str]]:
    if given is None:
        return None, ["no time for this photo (neither a timestamp nor EXIF time); it joins no event"]
    try:
        when = parse_timestamp(given, default_offset=spec.offset, what=source)
    except StationError as exc:
        return None, [f"{exc}; the photo's time was left empty"]
    if when.offset_assumed:
        return when, [_assumed(spec, when, source)]
    return ParsedTime(when.when.astimezone(timezone(spec.offset))), []  # the same instant, in local time


def _time_alone(given: str | None, source: str) -> tuple[str | None, tuple[str, ...]]:
    """A photo without a deployment keeps its time only when the time says its own offset."""
    if given is None:
        return None, ()
    try:
        return parse_timestamp(given, what=source).iso(), ()
    except StationError:
        return None, ()


def photo_time(spec: DeploymentSpec | None, *, taken_at: str | None, exif_time: str | None) -> Resolved:
    """A photo's ``taken_at`` in ``spec``'s time (offset assumed from it when the time gives none, with a
    warning), from ``taken_at`` as given, else ``exif_time``."""
    given = taken_at or exif_time
    source = "timestamp" if taken_at else "EXIF time"
    if spec is None:
        iso, warnings = _time_alone(given, source)
        return Resolved(None, None, iso, warnings)
    when, warnings = _time_in(spec, given, source)
    return Resolved(None, spec.key, when.iso() if when else None, tuple(warnings))


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class EventReport:
    """What :func:`form_events` did: sightings made, photos that joined an event, deployments touched."""

    events_created: int
    photos_grouped: int
    deployments: tuple[str, ...]
    gap_s: float

    def summary(self) -> str:
        return (f"{self.photos_grouped} photo(s) grouped into {self.events_created} new event(s) "
                f"(photos of one deployment within {self.gap_s:g} s of each other)")


def form_events(session: Session, photo_ids: Iterable[int] | None = None, *,
                gap_s: float = EVENT_GAP_S) -> EventReport:
    """Group photos with a deployment and a time but no sighting into events (sightings), per deployment: a photo
    more than ``gap_s`` after the previous one starts a new event (:func:`core.field.stations.group_events`).

    Only photos in ``photo_ids`` (all such photos when None) are given a sighting; a photo whose group also holds
    photos already in an automatically formed event of that deployment joins that event. Photos that already have
    a sighting (a manifest's, a Camtrap DP ``eventID``) are never touched. Flushes; the caller commits."""
    if gap_s < 0:
        raise CatalogueError(f"the event gap must be at least 0 seconds (got {gap_s:g})")
    q = select(Photo).where(Photo.deployment_id.is_not(None), Photo.taken_at.is_not(None),
                            Photo.sighting_id.is_(None))
    wanted = None if photo_ids is None else set(photo_ids)
    if wanted is not None:
        if not wanted:
            return EventReport(0, 0, (), gap_s)
        q = q.where(Photo.id.in_(wanted))
    pending: dict[int, list[Photo]] = {}
    for photo in session.scalars(q):
        pending.setdefault(photo.deployment_id, []).append(photo)
    created = grouped = 0
    touched = []
    for dep_id, photos in pending.items():
        dep = session.get(Deployment, dep_id)
        touched.append(dep.key)
        formed = list(session.scalars(
            select(Photo).join(Sighting, Photo.sighting_id == Sighting.id)
            .where(Photo.deployment_id == dep_id, Photo.taken_at.is_not(None), Sighting.deployment_id == dep_id,
                   Sighting.event_key.is_(None), Sighting.key.startswith(EVENT_KEY_PREFIX, autoescape=True))))
        members = formed + photos
        times = [parse_timestamp(p.taken_at).when for p in members]
        groups: dict[int, list[int]] = {}
        for i, g in enumerate(group_events(times, gap_s=gap_s)):
            groups.setdefault(g, []).append(i)
        for indices in groups.values():
            indices.sort(key=lambda i: times[i])
            existing = [members[i] for i in indices if members[i].sighting_id is not None]
            if existing:
                sighting = existing[0].sighting
            else:
                first = members[indices[0]]
                sighting = _event_sighting(session, dep, first.taken_at)
                created += 1
            for i in indices:
                photo = members[i]
                if photo.sighting_id is None:
                    photo.sighting = sighting
                    for ann in photo.annotations:
                        ann.sighting = sighting
                    grouped += 1
            session.flush()
    return EventReport(created, grouped, tuple(touched), gap_s)


def _event_sighting(session: Session, dep: Deployment, first_time: str) -> Sighting:
    """A new sighting for an event of ``dep`` starting at ``first_time`` (its key made unique)."""
    base = f"{EVENT_KEY_PREFIX}{dep.key}:{first_time}"[:190]
    key, n = base, 1
    while session.scalar(select(Sighting.id).where(Sighting.key == key)) is not None:
        n += 1
        key = f"{base}#{n}"
    sighting = Sighting(key=key, date=first_time, place=dep.location_name or dep.location_id, lat=dep.lat,
                        lon=dep.lon, camera=dep.camera_id or dep.camera_model, deployment_id=dep.id)
    session.add(sighting)
    session.flush()
    return sighting

