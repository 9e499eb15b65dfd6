"""The catalogue's study of a species as several secr sessions, for the density models beyond the null
(docs/density.md, "Models beyond the null"): sessions by the calendar year of the detections, or by the deployments'
group (Camtrap DP ``deploymentGroups``, kept in a deployment's details), each with its own stations, occasions and
effort exactly as the null fit builds them for one window (:func:`db.field.density.catalogue_density_study`), and
each animal's sex as the catalogue holds it.

Nothing is fitted or stored here: the sessions are read and assembled; :mod:`jobs.actions.density_models` fits them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import date

from sqlalchemy import select

from core.field import capthist as ch
from core.field import population as pop
from core.field.scr_data import Capture
from core.field.scr_errors import DensityInputError
from core.field.scr_models import normalise_sex
from core.field.stations import StationError, parse_timestamp
from db.field.density import CatalogueDensityStudy, catalogue_density_study
from db.field.population import PopulationStudy, population_study, secr_inputs
from db.models import Deployment, Individual
from db.session import Catalogue

#: How the catalogue's detections can be split into sessions.
SESSION_GROUPINGS = ("year", "deployment-group")
#: The Camtrap DP deployment field that names a deployment's groups ('season:2021 | grid:A').
GROUPS_FIELD = "deploymentGroups"


@dataclass(frozen=True)
class CatalogueSession:
    """One session: its name and its study (stations in UTM metres, captures, effort as usage)."""

    name: str
    study: CatalogueDensityStudy

    @property
    def captures(self) -> list[Capture]:
        """The session's captures named by the session (secr_inputs names them by the species)."""
        return [Capture(self.name, animal, occasion, station)
                for _, animal, occasion, station in self.study.secr.captures]


@dataclass(frozen=True)
class CatalogueSessions:
    """The sessions of a species, in time order (years) or in the groups' order of name, each animal's sex code as
    catalogued (by its secr name; None where the catalogue has none), and what was left out, in words."""

    species: str
    grouping: str | None
    sessions: tuple[CatalogueSession, ...]
    sex: dict[str, str | None]
    notes: tuple[str, ...]

    def sex_of(self, animal: str) -> str | None:
        """'F', 'M' or None for an animal's secr name; a code the models cannot read counts as unknown here (a
        model with sex refuses it by name when its sessions are built)."""
        try:
            return normalise_sex(self.sex.get(animal), animal=animal)
        except DensityInputError:
            return None


def parse_grouping(text: str | None) -> tuple[str | None, str | None]:
    """(grouping, group key) from ``year``, ``deployment-group`` or ``deployment-group:KEY`` (the groups written
    'KEY:value' in deploymentGroups); (None, None) for one session. Anything else is refused in one line."""
    value = (text or "").strip()
    if not value:
        return None, None
    kind, _, key = value.partition(":")
    kind = kind.strip().lower()
    if kind not in SESSION_GROUPINGS or (kind == "year" and key):
        raise ValueError(f"sessions {text!r} unknown; use year (the calendar year of each detection), "
                         "deployment-group (each deployment's deploymentGroups) or deployment-group:KEY (its "
                         "group written KEY:value)")
    if kind == "deployment-group" and ":" in value and not key.strip():
        raise ValueError(f"sessions {text!r}: name the group's key after the colon, e.g. deployment-group:season")
    return kind, key.strip() or None


def deployment_group(groups: object, key: str | None) -> str | None:
    """A deployment's session from its deploymentGroups value: the whole value, or with ``key`` the value of its
    'key:value' group ('season:2021 | grid:A' with key 'season': '2021'); None when it has none."""
    text = str(groups).strip() if groups is not None else ""
    if not text:
        return None
    if key is None:
        return text
    for part in text.split("|"):
        name, sep, value = part.partition(":")
        if sep and name.strip().lower() == key.lower() and value.strip():
            return value.strip()
    return None


def _restricted(study: PopulationStudy, deployments: set[str]) -> PopulationStudy:
    """``study`` with only the detections and effort of ``deployments``: the occasions are cut again so that the
    session's occasions are those its own cameras surveyed. The closed-population estimates are not made again
    (the density never reads them)."""
    detections = tuple(d for d in study.detections if d.deployment in deployments)
    stations = tuple(s for s in study.stations if s.deployment in deployments)
    full = pop.capture_histories([(x.individual, x.when) for x in detections], start=study.start,
                                 occasion_days=study.occasion_days, effort=[(x.begin, x.end) for x in stations],
                                 end=study.end)
    histories = full.surveyed()
    return replace(study, detections=detections, stations=stations, histories=histories,
                   all_occasions=full.n_occasions, estimates=(), frequencies=pop.capture_frequencies(histories),
                   discovery=tuple(pop.discovery_curve(histories)))


def _as_density_study(base: CatalogueDensityStudy, study: PopulationStudy) -> CatalogueDensityStudy:
    """A restricted population study with its own secr inputs and counts, the rest of ``base``'s fields kept."""
    secr = secr_inputs(study)
    notes = (f"{secr.left_out_words}.",) if secr.stations_without_coordinates else ()
    counts = {"individuals": study.histories.n_individuals, "occasions": study.histories.n_occasions,
              "epsg": secr.epsg, "annotations": len(study.detections),
              "stations_without_coordinates": list(secr.stations_without_coordinates),
              "detections_without_coordinates": len(secr.detections_without_coordinates)}
    return CatalogueDensityStudy(population=study, secr=secr, study={**base.study, **counts}, notes=notes)


def _sex_codes(cat: Catalogue, names: set[str]) -> dict[str, str | None]:
    """The active individuals' sex as catalogued, by their secr names."""
    with cat.unit_of_work() as s:
        rows = s.execute(select(Individual.name, Individual.sex).where(Individual.name.in_(sorted(names)))).all()
    return {ch.secr_token(name): sex for name, sex in rows}


def _by_year(cat: Catalogue, whole: CatalogueDensityStudy, *, species: str, occasion_days: float,
             date_from: date | None, date_to: date | None) -> tuple[list[CatalogueSession], list[str]]:
    years = sorted({d.when.year for d in whole.population.detections})
    out, notes = [], []
    for year in years:
        first = max(date(year, 1, 1), date_from) if date_from else date(year, 1, 1)
        last = min(date(year, 12, 31), date_to) if date_to else date(year, 12, 31)
        try:
            out.append(CatalogueSession(str(year), catalogue_density_study(
                cat, species=species, occasion_days=occasion_days, date_from=first, date_to=last)))
        except DensityInputError as exc:  # a year whose detections are all at stations without coordinates
            notes.append(f"session {year}: {exc}; left out.")
    return out, notes


def _by_group(cat: Catalogue, whole: CatalogueDensityStudy, *, key: str | None, species: str,
              occasion_days: float, date_from: date | None, date_to: date | None) -> tuple[list[CatalogueSession],
                                                                                        list[str]]:
    with cat.unit_of_work() as s:
        rows = [(d.key, d.start, d.end, (d.details or {}).get(GROUPS_FIELD))
                for d in s.scalars(select(Deployment).order_by(Deployment.id))]
    groups: dict[str, list[tuple[str, str, str]]] = {}
    ungrouped = []
    for dep_key, start, end, value in rows:
        group = deployment_group(value, key)
        if group is None:
            ungrouped.append(dep_key)
        else:
            groups.setdefault(group, []).append((dep_key, start, end))
    what = f"a {key}:value group in {GROUPS_FIELD}" if key else f"a {GROUPS_FIELD} value"
    if not groups:
        raise DensityInputError(f"no deployment has {what}; give the deployments their groups (Camtrap DP "
                                f"{GROUPS_FIELD}, e.g. 'season:2021') or use --sessions year")
    notes = [f"{len(ungrouped)} deployment(s) without {what} left out: {', '.join(ungrouped[:10])}"
             f"{' …' if len(ungrouped) > 10 else ''}."] if ungrouped else []
    sessions = []
    for name in sorted(groups):
        members = groups[name]
        try:
            first = min(parse_timestamp(start).when.date() for _, start, _ in members)
            last = max(parse_timestamp(end).when.date() for _, _, end in members)
        except StationError as exc:
            raise DensityInputError(str(exc)) from None
        first, last = (max(first, date_from) if date_from else first), (min(last, date_to) if date_to else last)
        if last < first:
            notes.append(f"group {name!r} has no deployment in the window: left out.")
            continue
        try:
            base = catalogue_density_study(cat, species=species, occasion_days=occasion_days, date_from=first,
                                           date_to=last)
        except DensityInputError as exc:  # nothing identified at a located station in the group's window
            notes.append(f"session {name}: {exc}; left out.")
            continue
        study = _restricted(base.population, {k for k, _, _ in members})
        sessions.append(CatalogueSession(name, _as_density_study(base, study)))
    return sessions, notes


def catalogue_sessions(cat: Catalogue, *, species: str | None = None, occasion_days: float = 1.0,
                       date_from: date | None = None, date_to: date | None = None,
                       grouping: str | None = None) -> CatalogueSessions:
    """The study of ``species`` as sessions (``grouping`` as :func:`parse_grouping` reads it; None: the window as
    one session). A session without an identified detection at a located station is left out with a note (secr
    fits no session without captures); no session at all is refused in one line."""
    kind, key = parse_grouping(grouping)
    whole = catalogue_density_study(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                                    date_to=date_to)
    name = whole.population.species
    notes: list[str] = list(whole.notes)
    if kind is None:
        sessions = [CatalogueSession(ch.secr_token(name), whole)]
    elif kind == "year":
        sessions, more = _by_year(cat, whole, species=name, occasion_days=occasion_days, date_from=date_from,
                                  date_to=date_to)
        notes += more
    else:
        sessions, more = _by_group(cat, whole, key=key, species=name, occasion_days=occasion_days,
                                   date_from=date_from, date_to=date_to)
        notes += more
    kept = []
    for session in sessions:
        if session.study.secr.captures and session.study.secr.traps:
            kept.append(session)
        else:
            notes.append(f"session {session.name!r} has no identified {name} at a station with coordinates: "
                         "left out.")
    if not kept:
        raise DensityInputError(f"no session has an identified {name} detected at a station with coordinates")
    animals = {d.individual for s in kept for d in s.study.population.detections}
    return CatalogueSessions(species=name, grouping=grouping, sessions=tuple(kept), sex=_sex_codes(cat, animals),
                             notes=tuple(dict.fromkeys(notes)))
