"""The catalogue's detections and camera stations as a capture-recapture study
(docs/DESIGN.md section 8).

A **detection** is an annotation of the species asked for, assigned to an active individual (an annotation of an
individual merged away counts for the one it was merged into), whose photo has a deployment and a time
(``photo.taken_at``, ISO 8601 with an offset; its local time is that offset's wall clock). Every other annotation
of the species is left out under the first reason that applies: no individual, no deployment, no time (or a time
that cannot be read), outside the window.

**Window and occasions.** Day 0 is the local calendar day of the earliest deployment start (or ``date_from`` when
later); the window ends with ``date_to`` (inclusive) when given, else with the day of the last deployment's end. Every
deployment active in the window gives effort (its active period in local time, clipped to the window);
:func:`core.field.population.capture_histories` cuts it into occasions of ``occasion_days`` and the estimates use the
occasions that carry effort or a detection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.field import capthist as ch
from core.field import population as pop
from core.field.stations import StationError, camera_days, local_period, parse_timestamp
from db.catalogue import CatalogueError, current_individual
from db.models import DEFAULT_SPECIES_ID, Deployment, Image, Individual, Photo, Species
from db.session import Catalogue
from db.species import find_species

#: Why an annotation of the species is not a detection, in the order the reasons are tried.
LEFT_OUT_REASONS = ("no_individual", "no_deployment", "no_time", "outside_window")
LEFT_OUT_WORDS = {
    "no_individual": "annotation(s) not assigned to an individual",
    "no_deployment": "annotation(s) on photos without a camera deployment",
    "no_time": "annotation(s) on photos without a readable time",
    "outside_window": "annotation(s) taken outside the study window",
}


class SpeciesNotChosen(CatalogueError):
    """Individuals of several species are catalogued and none was asked for; ``names`` lists them, so each screen
    can say in its own words where to choose one."""

    def __init__(self, names: Sequence[str]):
        self.names = tuple(names)
        super().__init__(f"individuals of {len(self.names)} species are catalogued ({', '.join(self.names)}): "
                         "choose one")


@dataclass(frozen=True)
class Detection:
    """One annotation used: who (the active individual's name), when (naive local time) and where."""

    annotation_id: int
    photo_id: int
    individual: str
    when: datetime
    deployment: str
    station: str
    file_name: str


@dataclass(frozen=True)
class Station:
    """One deployment as the study uses it: its station (location id, else name, else deployment id),
    coordinates and active period in local time, clipped to the window."""

    deployment: str
    station: str
    lat: float | None
    lon: float | None
    begin: datetime
    end: datetime


@dataclass(frozen=True)
class PopulationStudy:
    """What the estimates rest on and what they are."""

    species: str
    occasion_days: float
    date_from: date | None
    date_to: date | None
    start: date
    end: datetime  # exclusive, local time
    detections: tuple[Detection, ...]
    stations: tuple[Station, ...]
    histories: pop.CaptureHistories  # the occasions with effort or a detection
    all_occasions: int  # before occasions without effort or detection were dropped
    estimates: tuple[pop.Estimate, ...]
    frequencies: dict[int, int]
    discovery: tuple[int, ...]
    left_out: dict[str, tuple[int, ...]] = field(default_factory=dict)  # reason -> annotation ids
    annotations_considered: int = 0
    deployments_camera_days: float = 0.0  # every deployment's whole active period, as the Deployments screen counts

    def occasion_of(self, when: datetime) -> int | None:
        """Index (from 0) among the study's occasions of a local time, None outside every one of them."""
        for k, (lo, hi) in enumerate(self.histories.occasion_bounds):
            if lo <= when < hi:
                return k
        return None


def _local(text: str, what: str) -> datetime:
    """The wall-clock time of an ISO 8601 time with an offset (naive)."""
    return parse_timestamp(text, what=what).when.replace(tzinfo=None)


def choose_species(session: Session, species: str | int | None) -> Species:
    """The species asked for; by default the one species whose annotations have individuals (the catalogue's
    default species when none has); several: the curator must choose, and is told which."""
    if species is not None and str(species).strip():
        return find_species(session, str(species).strip())
    ids = list(session.scalars(select(Image.species_id).where(Image.individual_id.is_not(None)).distinct()))
    if len(ids) > 1:
        raise SpeciesNotChosen(sorted(session.scalars(select(Species.name).where(Species.id.in_(ids)))))
    return session.get(Species, ids[0] if ids else DEFAULT_SPECIES_ID) or find_species(session, DEFAULT_SPECIES_ID)


def current_individual_names(session: Session) -> dict[int, str | None]:
    """individual id -> the name of the active individual it is (or was merged into), None when there is none."""
    individuals = {i.id: i for i in session.scalars(select(Individual))}
    names: dict[int, str | None] = {}
    for ind_id, ind in individuals.items():
        now = current_individual(ind, individuals)
        names[ind_id] = now.name if now is not None and now.active else None
    return names


def population_study(cat: Catalogue, *, species: str | int | None = None, occasion_days: float = 1.0,
                     date_from: date | None = None, date_to: date | None = None) -> PopulationStudy:
    """Gather the species' detections and the deployments' effort, and estimate the population size."""
    if date_from is not None and date_to is not None and date_to < date_from:
        raise CatalogueError(f"the window ends ({date_to}) before it begins ({date_from})")
    with cat.unit_of_work() as s:
        sp = choose_species(s, species)
        deployments = list(s.scalars(select(Deployment).order_by(Deployment.id)))
        if not deployments:
            raise CatalogueError("the catalogue has no camera deployments: import a Camtrap DP package (or "
                                 "deployments) first; population estimates need the stations' active days")
        periods = {}
        for d in deployments:
            try:  # the end in the start's offset, as the Deployments screen reads it
                periods[d.id] = local_period(parse_timestamp(d.start, what=f"deployment {d.key!r} start").when,
                                             parse_timestamp(d.end, what=f"deployment {d.key!r} end").when)
            except StationError as exc:
                raise CatalogueError(str(exc)) from None
        first_day = min(begin for begin, _ in periods.values()).date()
        start = max(first_day, date_from) if date_from is not None else first_day
        start_dt = datetime.combine(start, datetime.min.time())
        last_day = date_to if date_to is not None else max(end for _, end in periods.values()).date()
        end_dt = datetime.combine(last_day + timedelta(days=1), datetime.min.time())  # the last day, whole
        if end_dt <= start_dt:
            raise CatalogueError(f"no deployment was active in the window from {start} to {last_day}")
        stations = []
        for d in deployments:
            begin, end = periods[d.id]
            begin, end = max(begin, start_dt), min(end, end_dt)
            if end > begin:
                stations.append(Station(deployment=d.key, station=d.station,
                                        lat=d.lat, lon=d.lon, begin=begin, end=end))
        if not stations:
            raise CatalogueError(f"no deployment was active in the window from {start} to "
                                 f"{(end_dt - timedelta(days=1)).date()}")
        by_id = {d.id: d for d in deployments}
        current_names = current_individual_names(s)
        rows = s.execute(select(Image.id, Image.individual_id, Photo.id, Photo.deployment_id, Photo.taken_at,
                                Photo.original_name)
                         .join(Photo, Image.photo_id == Photo.id)
                         .where(Image.species_id == sp.id).order_by(Image.id)).all()
    left: dict[str, list[int]] = {r: [] for r in LEFT_OUT_REASONS}
    detections = []
    for ann_id, ind_id, photo_id, dep_id, taken_at, file_name in rows:
        name = current_names.get(ind_id) if ind_id is not None else None
        if name is None:
            left["no_individual"].append(ann_id)
            continue
        if dep_id is None:
            left["no_deployment"].append(ann_id)
            continue
        try:
            when = _local(taken_at, "photo time") if taken_at else None
        except StationError:
            when = None
        if when is None:
            left["no_time"].append(ann_id)
            continue
        if not start_dt <= when < end_dt:
            left["outside_window"].append(ann_id)
            continue
        d = by_id[dep_id]
        detections.append(Detection(annotation_id=ann_id, photo_id=photo_id, individual=name, when=when,
                                    deployment=d.key, station=d.station,
                                    file_name=file_name))
    full = pop.capture_histories([(x.individual, x.when) for x in detections], start=start,
                                 occasion_days=float(occasion_days), effort=[(x.begin, x.end) for x in stations],
                                 end=end_dt)
    histories = full.surveyed()
    return PopulationStudy(
        species=sp.name, occasion_days=float(occasion_days), date_from=date_from, date_to=date_to, start=start,
        end=end_dt, detections=tuple(detections), stations=tuple(stations), histories=histories,
        all_occasions=full.n_occasions, estimates=tuple(pop.estimate_all(histories)),
        frequencies=pop.capture_frequencies(histories), discovery=tuple(pop.discovery_curve(histories)),
        left_out={k: tuple(v) for k, v in left.items()}, annotations_considered=len(rows),
        deployments_camera_days=sum(camera_days(begin, end) for begin, end in periods.values()))


def station_periods(stations: Sequence[Station]) -> dict[str, list[tuple[datetime, datetime]]]:
    """Station -> the active periods of its deployments (several deployments of one location: one station)."""
    out: dict[str, list[tuple[datetime, datetime]]] = {}
    for st in stations:
        out.setdefault(st.station, []).append((st.begin, st.end))
    return out


#: Detection ids listed in words (the counts are complete).
LISTED_IDS = 20


@dataclass(frozen=True)
class SecrInputs:
    """A study as secr reads it: one detector per located station (UTM metres in one zone, the usage its active
    days per occasion), one capture per detection at a located station (``Session ID Occasion Detector``, names
    made secr tokens), and what was left out for want of coordinates."""

    session: str
    traps: tuple[ch.Trap, ...]
    captures: tuple[tuple[str, str, int, str], ...]  # (session, individual token, occasion from 1, station)
    epsg: int | None
    stations_without_coordinates: tuple[str, ...]
    detections_without_coordinates: tuple[int, ...]  # annotation ids

    @property
    def left_out_words(self) -> str:
        """One sentence naming the stations without coordinates and the detections there ('' when none)."""
        if not self.stations_without_coordinates:
            return ""
        ids = self.detections_without_coordinates
        return (f"Station(s) without coordinates left out of secr's files: "
                f"{', '.join(self.stations_without_coordinates)} ({len(ids)} detection(s) there, annotation(s) "
                f"{', '.join(map(str, ids[:LISTED_IDS]))}{' …' if len(ids) > LISTED_IDS else ''})")


def secr_inputs(study: PopulationStudy) -> SecrInputs:
    """The study's detectors and captures for secr (``rosette export capthist``) and the density fit: a station's
    coordinates are the mean of its deployments' (several deployments of one location are one detector),
    projected to the UTM zone of the stations' centroid; a station without coordinates is left out, named, with
    the detections made there."""
    h = study.histories
    session = ch.secr_token(study.species)
    coords: dict[str, list[tuple[float, float]]] = {}
    for st in study.stations:
        coords.setdefault(st.station, [])
        if st.lat is not None and st.lon is not None:
            coords[st.station].append((st.lat, st.lon))
    located = {name: (sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts))
               for name, pts in coords.items() if pts}
    missing = tuple(sorted(name for name, pts in coords.items() if not pts))
    epsg = None
    traps: list[ch.Trap] = []
    if located:
        names = sorted(located)
        epsg, xy = ch.utm_coordinates([located[n] for n in names])
        usage = ch.usage_matrix(station_periods([st for st in study.stations if st.station in located]),
                                h.occasion_bounds)
        traps = [ch.Trap(name=n, x=x, y=y, usage=tuple(usage[n])) for n, (x, y) in zip(names, xy)]
    tokens: dict[str, str] = {}
    for name in h.individuals:
        token = ch.secr_token(str(name))
        if token in tokens.values():
            other = next(k for k, v in tokens.items() if v == token)
            raise ValueError(f"individuals {other!r} and {name!r} would both be written as {token!r} in secr's "
                             "files: rename one of them")
        tokens[str(name)] = token
    captures, unlocated = [], []
    for det in study.detections:
        k = study.occasion_of(det.when)
        if k is None:  # cannot happen: every occasion with a detection is kept
            raise AssertionError(f"annotation {det.annotation_id} fell in no occasion")
        if det.station in located:
            captures.append((session, tokens[det.individual], k + 1, det.station))
        else:
            unlocated.append(det.annotation_id)
    return SecrInputs(session=session, traps=tuple(traps), captures=tuple(captures), epsg=epsg,
                      stations_without_coordinates=missing, detections_without_coordinates=tuple(unlocated))
