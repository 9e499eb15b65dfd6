"""The catalogue's detection times of a species for its diel activity (docs/activity.md): one time per event.

An **event** is a sighting (photos of one animal-passing: a manifest's sighting column, a Camtrap DP ``eventID``,
or photos of one deployment within 60 s of each other); a photo in no sighting is an event of its own. An event's
time is the local wall-clock time (``photo.taken_at``, read on its own offset) of its first photo showing the
species, so a burst of 30 frames counts once.

- for the species: one time per event with an annotation of it;
- per individual: one time per event and active individual (an individual merged away counts for the one it was
  merged into); annotations with no individual are left out, counted;
- per sex: one time per event and sex (female or male: the individual's, else the annotation's own); animals of
  unknown sex are left out, counted.

Photos without a readable time are left out, counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select

from core.field.stations import StationError, parse_timestamp
from db.field.population import choose_species, current_individual_names
from db.models import Image, Individual, Photo
from db.session import Catalogue

SEXES = ("female", "male")


@dataclass(frozen=True)
class ActivityTimes:
    """One species' event times per group (the species' own name when not split), and what was left out."""

    species: str
    by: str | None
    groups: dict[str, tuple[datetime, ...]]  # group -> local times, one per event, in time order
    annotations: int  # annotations of the species considered
    photos: int  # photos with a readable time showing it
    events: int  # events with a readable time (the species' own count)
    left_out: dict[str, int] = field(default_factory=dict)  # reason -> annotations


def _local(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return parse_timestamp(text, what="photo time").when.replace(tzinfo=None)
    except StationError:
        return None


def activity_times(cat: Catalogue, *, species: str | int | None, by: str | None = None) -> ActivityTimes:
    """The event times of ``species`` (None: the one species with individuals), for the species as a whole or
    split ``by`` individual or sex (see the module's notes)."""
    if by not in (None, "individual", "sex"):
        raise ValueError(f"activity can be split by individual or sex, not {by!r}")
    with cat.unit_of_work() as s:
        sp = choose_species(s, species)
        names = current_individual_names(s)
        sex_of = dict(s.execute(select(Individual.name, Individual.sex)).all())  # names are unique
        rows = s.execute(select(Image.id, Image.individual_id, Image.sex, Image.sighting_id, Photo.id,
                                Photo.sighting_id, Photo.taken_at)
                         .join(Photo, Image.photo_id == Photo.id)
                         .where(Image.species_id == sp.id).order_by(Image.id)).all()
    left = {"no_time": 0, "no_individual": 0, "unknown_sex": 0}
    first: dict[tuple[str, str], datetime] = {}  # (group, event) -> its earliest time
    photos: set[int] = set()
    events: set[str] = set()
    for ann_id, ind_id, ann_sex, ann_sighting, photo_id, photo_sighting, taken_at in rows:
        when = _local(taken_at)
        if when is None:
            left["no_time"] += 1
            continue
        sighting = ann_sighting if ann_sighting is not None else photo_sighting
        event = f"sighting {sighting}" if sighting is not None else f"photo {photo_id}"
        photos.add(photo_id)
        events.add(event)
        if by is None:
            group = sp.name
        else:
            current = names.get(ind_id) if ind_id is not None else None
            if current is None:
                left["no_individual"] += 1
                continue
            if by == "individual":
                group = current
            else:
                own = (sex_of.get(current) or "").strip().lower()
                sex = own if own in SEXES else (ann_sex or "").strip().lower()
                if sex not in SEXES:
                    left["unknown_sex"] += 1
                    continue
                group = sex
        key = (group, event)
        if key not in first or when < first[key]:
            first[key] = when
    groups: dict[str, list[datetime]] = {}
    for (group, _), when in first.items():
        groups.setdefault(group, []).append(when)
    ordered = {g: tuple(sorted(groups[g])) for g in sorted(groups, key=lambda g: (-len(groups[g]), g))}
    return ActivityTimes(species=sp.name, by=by, groups=ordered, annotations=len(rows), photos=len(photos),
                         events=len(events), left_out={k: v for k, v in left.items() if v})
