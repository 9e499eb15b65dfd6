"""One individual's page from the store: its annotations, sightings and stations, when it was seen first and last,
its timeline, its best photo per flank, its home range, and a curator's setting of its sex and life stage.

Where a time comes from, in order: the photo's ``taken_at`` (ISO 8601 with the deployment's UTC offset), else the
sighting's date, else the photo's EXIF time; each point says which. Times are ordered by the local time written
(the camera's wall clock), which is what an ecologist reads on a camera-trap record.

Where a station comes from: the photo's deployment (else its sighting's deployment), by its ``location_id``, so the
deployments of one location with a gap in activity are one station, named by ``location_name``, with the
deployment's latitude and longitude; else the sighting's place (its name, else its coordinates) and latitude and
longitude. A station's coordinates are the mean of its records' coordinates; the home range is the minimum convex
polygon of the stations' coordinates (:mod:`core.field.home_range`).

Reading functions take a session and change nothing; :func:`set_traits` changes one individual and flushes (the
caller commits), audited through ``db.audit`` under the acting user and recorded as an undoable identity event.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from core.field.home_range import HomeRange, minimum_convex_polygon
from core.field.stations import StationError, parse_timestamp
from db.catalogue import CatalogueError, _record, get_individual
from db.models import (
    DecisionKind,
    Deployment,
    EventKind,
    Flank,
    Image,
    MatchDecision,
    Photo,
    Role,
    Sighting,
    Species,
    User,
)
from db.users import PermissionDenied, role_allows

#: Camtrap DP vocabularies (observations.sex, observations.lifeStage).
SEXES = ("female", "male", "unknown")
LIFE_STAGES = ("adult", "subadult", "juvenile", "unknown")
#: The order flanks are shown in.
FLANK_ORDER = tuple(f.value for f in Flank)

#: Where a time came from, in the words shown next to it.
FROM_PHOTO, FROM_SIGHTING, FROM_EXIF = "photo time", "sighting date", "EXIF time"
#: Where a station came from.
FROM_DEPLOYMENT, FROM_PLACE = "deployment", "sighting"

BEST_PHOTO_RULE = ("Best photo per flank: a photo whose identity a curator confirmed in match review (a standing "
                   "“same individual” or “new individual” decision) comes first, then one with a stored mask, then "
                   "the largest crop in pixels, then the most recent.")


@dataclass(frozen=True)
class Station:
    """A place the individual was seen at."""

    key: str  # "location <id>" for a deployment's location, "place <name>" or "at <lat>, <lon>" for a sighting's
    name: str
    source: str  # FROM_DEPLOYMENT or FROM_PLACE
    lat: float | None
    lon: float | None
    n_annotations: int
    n_sightings: int


@dataclass(frozen=True)
class SeenAt:
    """One annotation of the individual: when and where, and where each came from."""

    annotation_id: int
    photo_id: int
    flank: str
    when: datetime | None  # local wall-clock time (None: no readable time)
    when_text: str | None  # the time as stored
    when_source: str | None  # FROM_PHOTO, FROM_SIGHTING or FROM_EXIF
    station: str | None  # the station's name (None: no deployment and no sighting place)
    station_key: str | None
    sighting: str | None  # the sighting's key


@dataclass(frozen=True)
class BestPhoto:
    """The photo chosen to show one flank, and why (:data:`BEST_PHOTO_RULE`)."""

    flank: str
    annotation_id: int
    photo_id: int
    picture: str | None  # stored relative path: the crop's thumbnail, else the photo
    crop_px: int  # the annotation's box in the photo's pixels (width x height)
    confirmed: bool
    masked: bool
    when_text: str | None
    n_candidates: int  # annotations of this flank it was chosen from

    @property
    def why(self) -> str:
        parts = ["identity confirmed by a curator" if self.confirmed else "identity not confirmed in match review",
                 "masked" if self.masked else "no mask", f"crop {self.crop_px:,} px"]
        if self.when_text:
            parts.append(self.when_text)
        return f"#{self.annotation_id} ({self.flank} flank; best of {self.n_candidates}): " + ", ".join(parts)


@dataclass(frozen=True)
class IndividualHistory:
    """Everything the individual page shows, each number traceable to the rows it counts."""

    id: int
    name: str
    active: bool
    species: str
    sex: str | None
    life_stage: str | None
    n_annotations: int
    n_photos: int
    n_sightings: int  # distinct sightings its annotations belong to
    seen: list[SeenAt] = field(default_factory=list)  # by time; those without a readable time last
    stations: list[Station] = field(default_factory=list)  # most annotations first
    best_photos: list[BestPhoto] = field(default_factory=list)  # in FLANK_ORDER
    home_range: HomeRange = field(default_factory=lambda: HomeRange(0.0, 0, None, reason="no station with coordinates"))

    @property
    def n_stations(self) -> int:
        return len(self.stations)

    @property
    def timed(self) -> list[SeenAt]:
        return [s for s in self.seen if s.when is not None]

    @property
    def first_seen(self) -> SeenAt | None:
        timed = self.timed
        return timed[0] if timed else None

    @property
    def last_seen(self) -> SeenAt | None:
        timed = self.timed
        return timed[-1] if timed else None

    @property
    def n_without_time(self) -> int:
        return sum(1 for s in self.seen if s.when is None)

    @property
    def n_without_station(self) -> int:
        return sum(1 for s in self.seen if s.station_key is None)


def local_time(text: str | None) -> datetime | None:
    """The wall-clock time a stored timestamp or date states (its offset, if any, dropped), or None when it is not
    an ISO 8601 date or date-time."""
    if not text or not str(text).strip():
        return None
    try:
        return parse_timestamp(str(text), default_offset=timedelta(0)).when.replace(tzinfo=None)
    except StationError:
        return None


def _time_of(photo: Photo, ann: Image, sighting: Sighting | None) -> tuple[datetime | None, str | None, str | None]:
    for text, source in ((photo.taken_at, FROM_PHOTO), (sighting.date if sighting else None, FROM_SIGHTING),
                         (photo.exif_time or ann.exif_time, FROM_EXIF)):
        when = local_time(text)
        if when is not None:
            return when, text, source
    return None, None, None


def _station_of(photo: Photo, sighting: Sighting | None, sighting_deployments: dict[int, Deployment]
                ) -> tuple[str, str, str, float | None, float | None] | None:
    """(key, name, source, lat, lon) of where a photo was taken, or None when nothing says."""
    dep = photo.deployment
    if dep is None and sighting is not None and sighting.deployment_id is not None:
        dep = sighting_deployments.get(sighting.deployment_id)  # the photo's event names its deployment
    if dep is not None:
        return f"location {dep.station}", dep.location_name or dep.station, FROM_DEPLOYMENT, dep.lat, dep.lon
    if sighting is not None and sighting.place and sighting.place.strip():
        place = sighting.place.strip()
        return f"place {place}", place, FROM_PLACE, sighting.lat, sighting.lon
    if sighting is not None and sighting.lat is not None and sighting.lon is not None:
        name = f"{sighting.lat:.5f}, {sighting.lon:.5f}"
        return f"at {name}", name, FROM_PLACE, sighting.lat, sighting.lon
    return None


def crop_pixels(ann: Image) -> int:
    """The annotation's box in its photo's pixels: round(w x width) x round(h x height)."""
    return int(round(ann.bbox_w * ann.width)) * int(round(ann.bbox_h * ann.height))


def confirmed_annotations(session: Session, annotation_ids: list[int]) -> set[int]:
    """Annotations whose identity a curator confirmed: a standing "same individual" or "new individual" match
    decision names them as the photo decided on."""
    if not annotation_ids:
        return set()
    return set(session.scalars(select(MatchDecision.query_image_id).where(
        MatchDecision.query_image_id.in_(annotation_ids), MatchDecision.undone_at.is_(None),
        MatchDecision.decision.in_([DecisionKind.same, DecisionKind.new_individual]))))


def best_photo_key(*, confirmed: bool, masked: bool, crop_px: int, when: datetime | None,
                   annotation_id: int) -> tuple:
    """The sort key of :data:`BEST_PHOTO_RULE` (the largest is best); the newest annotation breaks a last tie."""
    return (confirmed, masked, crop_px, when is not None, when or datetime.min, annotation_id)


def individual_history(session: Session, individual_id: int) -> IndividualHistory:
    """Gather one individual's page (see the module's docstring for where times and stations come from)."""
    ind = get_individual(session, int(individual_id))
    anns = list(session.scalars(
        select(Image).where(Image.individual_id == ind.id).order_by(Image.id)
        .options(selectinload(Image.photo).selectinload(Photo.deployment), selectinload(Image.sighting),
                 selectinload(Image.photo).selectinload(Photo.sighting))))
    confirmed = confirmed_annotations(session, [a.id for a in anns])
    wanted = {sg.deployment_id for a in anns for sg in (a.sighting, a.photo.sighting) if sg and sg.deployment_id}
    sighting_deployments = {d.id: d for d in session.scalars(select(Deployment).where(Deployment.id.in_(wanted)))}
    seen: list[SeenAt] = []
    per_station: dict[str, dict] = {}
    sightings: set[int] = set()
    candidates: dict[str, list[tuple[tuple, Image, str | None]]] = defaultdict(list)
    for ann in anns:
        photo = ann.photo
        sighting = ann.sighting or photo.sighting
        if sighting is not None:
            sightings.add(sighting.id)
        when, when_text, when_source = _time_of(photo, ann, sighting)
        station = _station_of(photo, sighting, sighting_deployments)
        if station is not None:
            key, name, source, lat, lon = station
            st = per_station.setdefault(key, {"name": name, "source": source, "lats": [], "lons": [], "n": 0,
                                              "sightings": set()})
            st["n"] += 1
            if lat is not None and lon is not None:
                st["lats"].append(lat)
                st["lons"].append(lon)
            if sighting is not None:
                st["sightings"].add(sighting.id)
        seen.append(SeenAt(annotation_id=ann.id, photo_id=ann.photo_id, flank=ann.flank.value, when=when,
                           when_text=when_text, when_source=when_source, station=station[1] if station else None,
                           station_key=station[0] if station else None, sighting=sighting.key if sighting else None))
        key = best_photo_key(confirmed=ann.id in confirmed, masked=bool(ann.mask_path), crop_px=crop_pixels(ann),
                             when=when, annotation_id=ann.id)
        candidates[ann.flank.value].append((key, ann, when_text))
    seen.sort(key=lambda s: (s.when is None, s.when or datetime.min, s.annotation_id))
    stations = [Station(key=k, name=v["name"], source=v["source"],
                        lat=sum(v["lats"]) / len(v["lats"]) if v["lats"] else None,
                        lon=sum(v["lons"]) / len(v["lons"]) if v["lons"] else None,
                        n_annotations=v["n"], n_sightings=len(v["sightings"]))
                for k, v in per_station.items()]
    stations.sort(key=lambda s: (-s.n_annotations, s.name))
    located = [s for s in stations if s.lat is not None and s.lon is not None]
    home = minimum_convex_polygon([s.lat for s in located], [s.lon for s in located])
    best = []
    for flank in FLANK_ORDER:
        if not candidates.get(flank):
            continue
        key, ann, when_text = max(candidates[flank], key=lambda c: c[0])
        best.append(BestPhoto(flank=flank, annotation_id=ann.id, photo_id=ann.photo_id,
                              picture=ann.thumb_path or ann.blob_path, crop_px=key[2], confirmed=key[0],
                              masked=key[1], when_text=when_text, n_candidates=len(candidates[flank])))
    species = session.get(Species, ind.species_id)
    return IndividualHistory(id=ind.id, name=ind.name, active=ind.active, species=species.name if species else "",
                             sex=ind.sex, life_stage=ind.life_stage, n_annotations=len(anns),
                             n_photos=len({a.photo_id for a in anns}), n_sightings=len(sightings), seen=seen,
                             stations=stations, best_photos=best, home_range=home)


# --------------------------------------------------------------------------- sex and life stage


def check_trait(value: str | None, allowed: tuple[str, ...], *, what: str) -> str | None:
    """``value`` as stored: None (leave as is), "" (clear: not recorded) or one of ``allowed`` (any case); anything
    else is refused naming it and what is allowed."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text in ("", "not recorded", "not set"):
        return ""
    if text not in allowed:
        raise CatalogueError(f"{what} must be one of {', '.join(allowed)} (or empty to clear it), not {value!r}")
    return text


@dataclass(frozen=True)
class TraitsChange:
    """What :func:`set_traits` changed: ``{"sex": (old, new), ...}`` for the traits that changed."""

    individual_id: int
    name: str
    changed: dict[str, tuple[str | None, str | None]]


def refuse_viewers(session: Session, user: str) -> None:
    """A signed-in account that may not curate (a viewer, or a disabled account) is refused. A name without an
    account (a ``--user`` name on the command line, single-user mode) is someone with the catalogue's files in
    hand and is let through, as for every other change."""
    account = session.scalar(select(User).where(User.name == user))
    if account is None or not account.password_hash:
        return
    if not account.active:
        raise PermissionDenied(f"{user}'s account is disabled; it cannot change an individual")
    if not role_allows(account.role, Role.curator):
        raise PermissionDenied(f"{user} is a {Role(account.role).value}; setting sex and life stage needs the "
                               "curator role (an admin can change roles in the People tab).")


def set_traits(session: Session, individual_id: int, *, sex: str | None, life_stage: str | None,
               user: str) -> TraitsChange:
    """Set an individual's sex and/or life stage (None: leave as is; "": clear). Audited as ``individual.traits``
    (old and new values) under the acting user; flushes, the caller commits."""
    refuse_viewers(session, user)
    sex = check_trait(sex, SEXES, what="sex")
    life_stage = check_trait(life_stage, LIFE_STAGES, what="life stage")
    ind = get_individual(session, int(individual_id))
    if not ind.active:
        raise CatalogueError(f"{ind.name!r} was merged into another individual; set its traits there")
    changed: dict[str, tuple[str | None, str | None]] = {}
    for column, value in (("sex", sex), ("life_stage", life_stage)):
        if value is None:
            continue
        new = value or None
        old = getattr(ind, column)
        if old != new:
            setattr(ind, column, new)
            changed[column] = (old, new)
    if changed:  # an undoable change, listed in the Catalogue's recent changes
        _record(session, EventKind.traits, user=user, individual_id=ind.id,
                payload={"name": ind.name, "changed": {k: list(v) for k, v in changed.items()}})
    return TraitsChange(individual_id=ind.id, name=ind.name, changed=changed)
