"""The catalogue's study of a species as the two-flank partial-identity model reads it (docs/density.md, "One-flank
photos"): the stations, captures and known links of :mod:`core.field.partial_id`, the same objects its file readers
give.

The study itself (species, window, occasions, the located stations in UTM metres) is the ordinary density's,
:func:`db.field.density.catalogue_density_study`. On top of it:

- a detection's flank is its annotation's flank label (left or right); front and other views show no flank's
  pattern and are left out, named; a detection whose flank is not set refuses the study, since leaving it out
  would bias the fit towards the animals whose photos were labelled;
- an individual seen on one flank only is a left- or a right-flank identity; one seen on both (the curators
  matched its two sides) is a known link, or an animal seen on both sides at once (``B``) when both its flanks were
  photographed at one station on one occasion when two cameras worked there;
- the cameras of a station on an occasion are the most of its deployments active at one time during it, capped at
  two (a replaced camera is still one);
- a left- and a right-flank identity a curator said are not one animal (a rejected flank link,
  :mod:`db.field.flank_links`) are a cannot-link pair: the fit never puts them on one individual.

Nothing is fitted or stored here: :mod:`jobs.actions.partial_id` fits it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

from sqlalchemy import select

from core.field.partial_id import FlankCapture, FlankStation
from db.catalogue import CatalogueError
from db.field.density import CatalogueDensityStudy, catalogue_density_study
from db.field.flank_links import rejected_pairs
from db.field.population import Station
from db.models import Flank, Image
from db.session import Catalogue

#: The most cameras the model tells apart at a station: one sees one flank at a time, two can see both at once.
MAX_CAMERAS = 2
#: A catalogue flank label -> the model's flank code.
FLANK_CODE = {Flank.left: "L", Flank.right: "R"}


@dataclass(frozen=True)
class CatalogueFlankStudy:
    """The model's inputs from the catalogue: ``stations`` (UTM metres, cameras per occasion), ``captures`` (an
    identity is an individual's name; a both-flank individual's L, R and B captures share it) and ``links`` (each
    individual seen on both flanks but never on both at once: its name on both sides), the ordinary density's
    study beneath them, and the annotations left out for showing no flank, with their counts per label."""

    density: CatalogueDensityStudy
    stations: tuple[FlankStation, ...]
    captures: tuple[FlankCapture, ...]
    links: tuple[tuple[str, str], ...]
    left_identities: tuple[str, ...]
    right_identities: tuple[str, ...]
    both_side_animals: tuple[str, ...]
    known_links: tuple[str, ...]
    no_flank: dict[str, int]
    cannot_link: tuple[tuple[str, str], ...] = ()  # (left identity, right identity) a curator rejected

    @property
    def species(self) -> str:
        return self.density.population.species


def most_at_once(periods: Sequence[tuple[datetime, datetime]], lo: datetime, hi: datetime) -> int:
    """The most of ``periods`` active at one moment of [lo, hi): a deployment replaced mid-occasion is one camera,
    two deployments side by side are two."""
    events: list[tuple[datetime, int]] = []
    for begin, end in periods:
        b, e = max(begin, lo), min(end, hi)
        if e > b:
            events += [(b, 1), (e, -1)]
    # an end sorts before a start at the same moment: a camera swapped at midnight is not two at once
    events.sort(key=lambda ev: (ev[0], ev[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def station_cameras(stations: Sequence[Station], bounds: Sequence[tuple[datetime, datetime]],
                    names: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Station name -> its cameras on each occasion (0, 1 or 2), from the deployments active in the window."""
    periods: dict[str, list[tuple[datetime, datetime]]] = {n: [] for n in names}
    for st in stations:
        if st.station in periods:
            periods[st.station].append((st.begin, st.end))
    return {n: tuple(min(MAX_CAMERAS, most_at_once(periods[n], lo, hi)) for lo, hi in bounds) for n in names}


def _flank_labels(cat: Catalogue, annotation_ids: Sequence[int]) -> dict[int, Flank]:
    wanted = sorted(set(annotation_ids))
    out: dict[int, Flank] = {}
    with cat.unit_of_work() as s:
        for lo in range(0, len(wanted), 500):
            out.update(dict(s.execute(select(Image.id, Image.flank).where(Image.id.in_(wanted[lo:lo + 500]))).all()))
    return out


def catalogue_flank_study(cat: Catalogue, *, species: str | None = None, occasion_days: float = 1.0,
                          date_from: date | None = None, date_to: date | None = None) -> CatalogueFlankStudy:
    """The partial-identity model's inputs for ``species`` in the window (see the module's notes). Refused in one
    sentence (:class:`CatalogueError`, or the ordinary density's errors) when the study has nothing to fit, when
    detections have no flank set, or when no individual is a one-flank identity."""
    study = catalogue_density_study(cat, species=species, occasion_days=occasion_days, date_from=date_from,
                                    date_to=date_to)
    pop_study = study.population
    located = study.located
    detections = [d for d in pop_study.detections if d.station in located]
    labels = _flank_labels(cat, [d.annotation_id for d in detections])
    unset = [d for d in detections if labels.get(d.annotation_id, Flank.unknown) == Flank.unknown]
    if unset:
        raise CatalogueError(f"{len(unset)} of the {len(detections)} {pop_study.species} detection(s) have no flank "
                             f"set (annotation(s) {', '.join(str(d.annotation_id) for d in unset[:10])}"
                             f"{' …' if len(unset) > 10 else ''}): set each one's flank in the Mask or Match review "
                             "tab, then fit again")
    no_flank: dict[str, int] = {}
    # (individual, station, occasion from 1) -> the flank codes photographed there then
    seen: dict[tuple[str, str, int], set[str]] = {}
    for d in detections:
        label = labels[d.annotation_id]
        if label not in FLANK_CODE:
            no_flank[label.value] = no_flank.get(label.value, 0) + 1
            continue
        k = pop_study.occasion_of(d.when)
        if k is None:  # cannot happen: every occasion with a detection is kept
            raise AssertionError(f"annotation {d.annotation_id} fell in no occasion")
        seen.setdefault((d.individual, d.station, k + 1), set()).add(FLANK_CODE[label])
    if not seen:
        raise CatalogueError(f"none of the {len(detections)} {pop_study.species} detection(s) shows a left or a "
                             "right flank: there is nothing for the partial-identity model to fit")
    names = [t.name for t in study.secr.traps]
    cameras = station_cameras(pop_study.stations, pop_study.histories.occasion_bounds, names)
    stations = tuple(FlankStation(t.name, float(t.x), float(t.y), cameras[t.name]) for t in study.secr.traps)
    sides: dict[str, set[str]] = {}
    for (individual, _, _), codes in seen.items():
        sides.setdefault(individual, set()).update(codes)
    captures: list[FlankCapture] = []
    for (individual, station, occasion), codes in sorted(seen.items()):
        if codes == {"L", "R"} and cameras[station][occasion - 1] == MAX_CAMERAS:
            captures.append(FlankCapture(individual, occasion, station, "B"))
        else:  # one camera photographs one flank at a time, so both there are two one-side captures
            captures += [FlankCapture(individual, occasion, station, code) for code in sorted(codes)]
    both_at_once = {c.identity for c in captures if c.flank == "B"}
    linked = sorted(n for n, s in sides.items() if s == {"L", "R"} and n not in both_at_once)
    lefts = tuple(sorted(n for n, s in sides.items() if s == {"L"}))
    rights = tuple(sorted(n for n, s in sides.items() if s == {"R"}))
    if not lefts and not rights:
        raise CatalogueError(f"every {pop_study.species} individual in the window was photographed on both flanks, "
                             "so no identity is one-flank: the ordinary density applies (rosette density without "
                             "--flanks)")
    with cat.unit_of_work() as s:
        rejected = rejected_pairs(s)
    cannot_link = tuple((a, b) for a, b in rejected if a in set(lefts) and b in set(rights))
    return CatalogueFlankStudy(density=study, stations=stations, captures=tuple(captures),
                               links=tuple((n, n) for n in linked), left_identities=lefts, right_identities=rights,
                               both_side_animals=tuple(sorted(both_at_once)), known_links=tuple(linked),
                               no_flank=no_flank, cannot_link=cannot_link)
