"""The catalogue as a Camtrap DP 1.0 package (``rosette export camtrap-dp OUT``, the Export tab; docs/DESIGN.md
section 8): this module gathers the rows, :mod:`core.field.camtrapdp_writer` writes and validates them.

Deployments with coordinates, their photos with a time (copied into ``media/<deploymentID>/``), one observation
per annotation (event-level ones go out as the one observation they came in as), each with the identity event
that classified it, and the species' common names. What Camtrap DP cannot hold (photos without a deployment,
coordinates, time or file) is left out and counted. People stay private (:mod:`db.export_rules`): person boxes
are blurred by default, or the photo left out, or kept as it is (audited first). An export that would write the
species ``default`` is refused before anything is written.

Each resource's rows and ids: docs/camtrapdp.md."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from core.annotations import Box
from core.field.camtrapdp_writer import (
    MEDIA_TYPES,
    PackageMetadata,
    PackageProblem,
    table_fields,
    timestamp,
    validate_package,
    write_package,
)
from core.io.images import extension_for
from core.io.privacy import DEFAULT_PEOPLE, blurred_file, blurred_format, check_people_choice, person_boxes
from core.field.stations import StationError, parse_timestamp
from db.catalogue import CatalogueError, current_individual
from db.export_rules import record_people_kept, refuse_unnamed_species
from db.models import Deployment, EventKind, IdentityEvent, Image, Individual, Photo, Species
from db.session import Catalogue
from db.storage import is_disk_full

#: Box sources a detector drew (a machine's observation when no person identified the animal).
DETECTOR_SOURCES = ("megadetector",)
DETECTOR_PREFIX = "detector:"
#: What Camtrap DP's ``lifeStage`` and ``sex`` admit (Rosette's ``unknown`` is written as an empty cell).
LIFE_STAGES = ("adult", "subadult", "juvenile")
SEXES = ("female", "male")


@dataclass(frozen=True)
class Classification:
    """Who put an annotation under its individual, and when (from the identity events)."""

    user: str
    at: datetime
    via: str  # assign | merge | split | import


@dataclass
class CamtrapDPExport:
    """What a Camtrap DP export wrote, what it left out and why, and whether the package is valid."""

    path: Path
    deployments: int = 0
    media: int = 0
    observations: int = 0
    individuals: int = 0
    media_files: int = 0
    left_out: dict[str, int] = field(default_factory=dict)  # reason -> photos left out
    problems: list[PackageProblem] = field(default_factory=list)
    people: str = DEFAULT_PEOPLE  # what was done with the photos showing people (core.io.privacy.PEOPLE_CHOICES)
    people_observations: int = 0  # observations of people (observationType human)
    photos_with_people: int = 0  # photos showing people in the package (blurred or kept) or left out (omit)
    event_observations: int = 0  # event-level observations

    @property
    def valid(self) -> bool:
        return not self.problems

    @property
    def summary(self) -> str:
        text = (f"Camtrap DP package at {self.path}: {self.deployments} deployment(s), {self.media} photo(s), "
                f"{self.observations} observation(s) ({self.people_observations} of people), "
                f"{self.individuals} individual(s)")
        if self.people_words:
            text += f"; {self.people_words}"
        if self.left_out:
            text += "; left out: " + ", ".join(f"{n} photo(s) {why}" for why, n in self.left_out.items())
        if self.problems:
            text += f"; NOT VALID Camtrap DP ({len(self.problems)} problem(s), the first: {self.problems[0]})"
        else:
            text += "; checked valid against the Camtrap DP 1.0 profile and table schemas"
        return text

    @property
    def people_words(self) -> str:
        """What became of the photos showing people, in words ("" when there were none)."""
        n = self.photos_with_people
        if not n:
            return ""
        if self.people == "omit":
            return f"{n} photo(s) showing people left out (people: omit)"
        if self.media_files == 0:
            return f"{n} photo(s) show people (tables only, no photo file written)"
        if self.people == "keep":
            return f"{n} photo(s) showing people copied unblurred (people: keep, recorded in the audit trail)"
        return f"{n} photo(s) showing people copied with the people blurred"

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "deployments": self.deployments, "media": self.media,
                "observations": self.observations, "individuals": self.individuals,
                "media_files": self.media_files, "left_out": dict(self.left_out), "valid": self.valid,
                "problems": [p.to_dict() for p in self.problems], "people": self.people,
                "people_observations": self.people_observations, "photos_with_people": self.photos_with_people,
                "event_observations": self.event_observations, "people_words": self.people_words,
                "summary": self.summary}


# --------------------------------------------------------------------------- who classified what


def classifications(session: Session) -> dict[int, Classification]:
    """For each annotation, the standing identity event that last moved it into an individual (events that were
    undone do not count, so an undo gives the earlier assignment back)."""
    found: dict[int, Classification] = {}
    events = session.scalars(select(IdentityEvent).where(
        IdentityEvent.undone_at.is_(None),
        IdentityEvent.kind.in_([EventKind.assign, EventKind.merge, EventKind.split])).order_by(IdentityEvent.id))
    for ev in events:
        p = ev.payload or {}
        if ev.kind == EventKind.assign:
            ids = [p.get("image_id")]
            via = "import" if p.get("via") == "import" else "assign"
        elif ev.kind == EventKind.merge:
            ids, via = p.get("image_ids") or [], "merge"
        else:
            ids, via = [int(k) for k in (p.get("previous") or {})], "split"
        for image_id in ids:
            if image_id is not None:
                found[int(image_id)] = Classification(user=ev.user, at=ev.created_at, via=via)
    return found


# --------------------------------------------------------------------------- rows


def _known(details: Mapping[str, Any] | None, table: str) -> dict[str, Any]:
    """The Camtrap DP fields of ``details`` that ``table`` has (other keys have no column there)."""
    columns = set(table_fields(table))
    return {k: v for k, v in (details or {}).items() if k in columns and v not in (None, "")}


def _when(text: str, *, what: str) -> str:
    """A stored ISO 8601 time as Camtrap DP writes it (whole seconds, offset)."""
    return timestamp(parse_timestamp(text, what=what).when)


def deployment_row(dep: Deployment) -> dict[str, Any]:
    row = _known(dep.details, "deployments")
    row.update(deploymentID=dep.key, locationID=dep.location_id, locationName=dep.location_name,
               latitude=dep.lat, longitude=dep.lon,
               deploymentStart=_when(dep.start, what=f"deployment {dep.key!r} start"),
               deploymentEnd=_when(dep.end, what=f"deployment {dep.key!r} end"),
               cameraID=dep.camera_id, cameraModel=dep.camera_model)
    return row


def photo_time(photo: Photo, dep: Deployment) -> str | None:
    """When ``photo`` was taken, as Camtrap DP writes it: ``taken_at``, else its EXIF time in the deployment's
    time zone; None when it has neither (or they cannot be read)."""
    offset = parse_timestamp(dep.start).when.utcoffset() or timedelta(0)
    for text in (photo.taken_at, photo.exif_time):
        if text:
            try:
                return timestamp(parse_timestamp(text, default_offset=offset).when)
            except StationError:
                continue
    return None


def _safe(text: str) -> str:
    """A file or folder name Camtrap DP's ``filePath`` pattern admits (no leading dot, no ``..``)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", text).replace("..", "_").lstrip("._-")
    return name[:120] or "file"


def media_path(photo: Photo, dep: Deployment, *, taken: set[str], suffix: str | None = None) -> str:
    """Where ``photo``'s file lies inside the package: ``media/<deploymentID>/<its file name>``, the photo's id
    put before the name when another photo of the package has that name already (``taken``, updated).
    ``suffix``: the file's own, unless a blurred copy is written in another format."""
    original = PurePosixPath(photo.original_name.replace("\\", "/")).name
    suffix = suffix or PurePosixPath(photo.blob_path).suffix or PurePosixPath(original).suffix
    stem = PurePosixPath(original).stem if PurePosixPath(original).suffix else original
    path = f"media/{_safe(dep.key)}/{_safe(stem)}{suffix.lower()}"
    if path.lower() in taken:
        path = f"media/{_safe(dep.key)}/{photo.id}-{_safe(stem)}{suffix.lower()}"
    taken.add(path.lower())
    return path


def fallback_id(prefix: str, row_id: int, content_hash: str, *, stored: set[str]) -> str:
    """``<prefix>-<id>`` for a photo or annotation that came without a Camtrap DP id; when an imported one is
    already called that (an earlier export, imported elsewhere), the id is made unique with the file's hash."""
    made = f"{prefix}-{row_id}"
    return made if made not in stored else f"{made}-{content_hash[:12]}"


def media_row(photo: Photo, dep: Deployment, *, when: str, file_path: str, media_id: str) -> dict[str, Any]:
    row = {"filePublic": False}  # the files travel inside the package, not at a public address
    row.update(_known(photo.media_details, "media"))
    row.update(mediaID=media_id, deploymentID=dep.key, timestamp=when,
               filePath=file_path, fileName=PurePosixPath(photo.original_name.replace("\\", "/")).name,
               fileMediatype=MEDIA_TYPES.get((photo.format or "").upper(), "image/jpeg"))
    return row


def _detector_named(source: str | None, photo: Photo) -> str | None:
    """The detector behind boxes of ``source`` on ``photo`` (None: not a detector's, e.g. a curator's or a
    package's)."""
    if source in DETECTOR_SOURCES:
        named = (photo.detections or {}).get("detector")
        return str(named) if named else "MegaDetector"
    if source and source.startswith(DETECTOR_PREFIX):
        return source[len(DETECTOR_PREFIX):]
    return None


def _detector(ann: Image, photo: Photo) -> str | None:
    """The detector that drew ``ann``'s box, or None when a person drew it (or it is the whole photo)."""
    return _detector_named(ann.box_source, photo)


def observation_row(ann: Image, photo: Photo, media: Mapping[str, Any], *, observation_id: str,
                    event_id: str | None, species: str | None, individual: Individual | None,
                    classified: Classification | None) -> dict[str, Any]:
    """One annotation as a media-level Camtrap DP observation."""
    row: dict[str, Any] = {"count": 1}
    row.update(_known(ann.observation_details, "observations"))
    row.update(observationID=observation_id, deploymentID=media["deploymentID"],
               mediaID=media["mediaID"], eventID=event_id, eventStart=media["timestamp"],
               eventEnd=media["timestamp"], observationLevel="media", observationType="animal",
               scientificName=species)
    life_stage = ann.life_stage or (individual.life_stage if individual is not None else None)
    sex = ann.sex or (individual.sex if individual is not None else None)
    row["lifeStage"] = life_stage if life_stage in LIFE_STAGES else None
    row["sex"] = sex if sex in SEXES else None
    box = ann.box
    if box.is_whole:
        row.update(bboxX=None, bboxY=None, bboxWidth=None, bboxHeight=None)
    else:
        row.update(bboxX=round(box.x, 6), bboxY=round(box.y, 6), bboxWidth=round(box.w, 6),
                   bboxHeight=round(box.h, 6))
    if individual is not None:
        row.update(individualID=individual.name, classificationMethod="human",
                   classifiedBy=classified.user if classified else None,
                   classificationTimestamp=timestamp(classified.at.replace(tzinfo=timezone.utc))
                   if classified else None, classificationProbability=None)
        return row
    row["individualID"] = None
    detector = _detector(ann, photo)
    if detector is not None:
        row.update(classificationMethod="machine", classifiedBy=detector, classificationTimestamp=None,
                   classificationProbability=ann.box_confidence)
    return row


def _extra_observations(photo: Photo, media: Mapping[str, Any], event_id: str | None) -> list[dict[str, Any]]:
    """A ``blank`` observation for a photo without annotations, a ``human`` one per person box."""
    base = {"deploymentID": media["deploymentID"], "mediaID": media["mediaID"], "eventID": event_id,
            "eventStart": media["timestamp"], "eventEnd": media["timestamp"], "observationLevel": "media"}
    out = []
    if not photo.annotations:
        out.append({**base, "observationID": f"{media['mediaID']}-blank", "observationType": "blank"})
    detector = _detector_named((photo.detections or {}).get("source"), photo)
    for k, person in enumerate(photo.people or []):
        x, y, w, h = (float(v) for v in person[:4])
        if w <= 0 or h <= 0:
            continue
        row = {**base, "observationID": f"{media['mediaID']}-person-{k + 1}", "observationType": "human",
               "count": 1, "bboxX": round(x, 6), "bboxY": round(y, 6), "bboxWidth": round(w, 6),
               "bboxHeight": round(h, 6)}
        if detector is not None:  # a detector's person box; one from a package keeps no classifier
            row.update(classificationMethod="machine", classifiedBy=detector,
                       classificationProbability=float(person[4]) if len(person) > 4 else None)
        out.append(row)
    return out


# --------------------------------------------------------------------------- the export


def _left_out(counts: dict[str, int], why: str) -> None:
    counts[why] = counts.get(why, 0) + 1


class ExportCancelled(CatalogueError):
    """The export was asked to stop (its job cancelled); nothing of the package is left behind."""


def _is_event_level(ann: Image) -> bool:
    return str((ann.observation_details or {}).get("observationLevel") or "").strip().lower() == "event"


def _event_bound(text: Any, *, what: str) -> Any:
    """An event-level observation's own eventStart / eventEnd as Camtrap DP writes it, or None when it has none
    (or it cannot be read: the times of its photos are used instead)."""
    if not text:
        return None
    try:
        return parse_timestamp(str(text), what=what).when
    except StationError:
        return None


def event_level_rows(members: Mapping[tuple[str, int | None], list[tuple[Image, dict[str, Any]]]]
                     ) -> list[dict[str, Any]]:
    """One event-level observation per (observationID, individual): an event-level observation came in as one
    annotation on each photo of its event (keyed ``<observationID>@<mediaID>``); it goes out as the observation it
    was, without mediaID or box, from its own eventStart/eventEnd (else its photos' first and last times). When
    curators put its animals under different individuals since, each individual gets its own row, the first
    keeping the observationID and the others ``<observationID>-2``, ``-3`` ..."""
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for (oid, _individual), found in members.items():
        anns = [a for a, _ in found]
        media_rows = [r for _, r in found]
        row = dict(media_rows[0])
        details = anns[0].observation_details or {}
        times = [parse_timestamp(r["eventStart"]).when for r in media_rows]
        start = _event_bound(details.get("eventStart"), what=f"observation {oid!r} eventStart") or min(times)
        end = _event_bound(details.get("eventEnd"), what=f"observation {oid!r} eventEnd") or max(times)
        seen[oid] = seen.get(oid, 0) + 1
        row.update(observationID=oid if seen[oid] == 1 else f"{oid}-{seen[oid]}", mediaID=None,
                   observationLevel="event", eventStart=timestamp(min(start, end)), eventEnd=timestamp(max(start, end)),
                   bboxX=None, bboxY=None, bboxWidth=None, bboxHeight=None)
        rows.append(row)
    return rows


def export_camtrap_dp(cat: Catalogue, out: str | Path, *, user: str, title: str | None = None,
                      sampling_design: str = "opportunistic", include_media: bool = True,
                      people: str = DEFAULT_PEOPLE, now: datetime | None = None,
                      progress: Callable[[int, int], None] | None = None,
                      should_cancel: Callable[[], bool] | None = None) -> CamtrapDPExport:
    """Write the catalogue as a Camtrap DP package into the folder ``out`` (new, or empty) and validate it.

    ``include_media`` False writes the tables only (each ``filePath`` still names where the file would lie).
    ``people`` (blur | omit | keep) is what becomes of the photos showing people (see the module's docstring).
    ``progress(done, total)`` is called as the photo files are written and the package is checked;
    ``should_cancel()`` true stops the export (:class:`ExportCancelled`), leaving nothing behind.
    Returns what was written; an invalid package is reported in ``problems`` (by resource, row and field), not
    raised, so the curator sees every reason at once. A package that would name the species ``default`` is
    refused before anything is written."""
    check_people_choice(people)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CatalogueError(f"{out} already exists and is not an empty folder; choose a new folder for the package")
    result = CamtrapDPExport(path=out, people=people)
    deployments: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    observations: list[dict[str, Any]] = []
    events: dict[tuple[str, int | None], list[tuple[Image, dict[str, Any]]]] = {}
    copies: list[tuple[Path, str, list[Box] | None]] = []  # source, path in the package, person boxes to blur
    curators: set[str] = set()
    with cat.unit_of_work() as s:
        known_species = list(s.scalars(select(Species)))
        species = {sp.id: sp.name for sp in known_species}
        common_names = {sp.name: sp.common_name for sp in known_species if sp.common_name}
        individuals = {ind.id: ind for ind in s.scalars(select(Individual))}
        classified = classifications(s)
        media_keys = set(s.scalars(select(Photo.media_key).where(Photo.media_key.is_not(None))))
        observation_keys = set(s.scalars(select(Image.observation_key).where(Image.observation_key.is_not(None))))
        usable: dict[int, Deployment] = {}
        for dep in s.scalars(select(Deployment).order_by(Deployment.key)):
            if dep.lat is None or dep.lon is None:
                continue
            deployments.append(deployment_row(dep))
            usable[dep.id] = dep
        if not deployments:
            raise CatalogueError("the catalogue has no deployment with coordinates, and a Camtrap DP package needs "
                                 "at least one (add the camera stations with their latitude and longitude first)")
        photos = s.scalars(select(Photo).options(selectinload(Photo.annotations), selectinload(Photo.sighting))
                           .order_by(Photo.taken_at, Photo.id))
        named: set[str] = set()
        paths: set[str] = set()  # the media files' paths in the package, lower case (unique on every disk)
        for photo in photos:
            if photo.deployment_id is None:
                _left_out(result.left_out, "without a deployment")
                continue
            dep = usable.get(photo.deployment_id)
            if dep is None:
                _left_out(result.left_out, "of a deployment without coordinates")
                continue
            when = photo_time(photo, dep)
            if when is None:
                _left_out(result.left_out, "without a time")
                continue
            source = cat.blobs.existing(photo.blob_path)
            if include_media and source is None:
                _left_out(result.left_out, "whose stored file is missing")
                continue
            boxes = person_boxes(photo.people)
            if boxes:
                result.photos_with_people += 1
                if people == "omit":
                    _left_out(result.left_out, "showing people (people: omit)")
                    continue
            blur = bool(boxes) and people == "blur" and include_media
            # a blurred copy keeps its file's format, but for one Pillow cannot write (then PNG)
            written_format = blurred_format(photo.format) if blur else None
            converted = written_format is not None and extension_for(written_format) != extension_for(photo.format)
            file_path = media_path(photo, dep, taken=paths,
                                   suffix=extension_for(written_format) if converted else None)
            media_id = photo.media_key or fallback_id("photo", photo.id, photo.content_hash, stored=media_keys)
            row = media_row(photo, dep, when=when, file_path=file_path, media_id=media_id)
            if converted:
                row["fileMediatype"] = MEDIA_TYPES.get(written_format, row["fileMediatype"])
            media.append(row)
            if include_media:
                copies.append((Path(source), file_path, boxes if blur else None))
            sighting = photo.sighting
            event_id = (sighting.event_key or sighting.key) if sighting is not None else None
            for ann in photo.annotations:
                ind = current_individual(individuals.get(ann.individual_id) if ann.individual_id else None,
                                         individuals)
                how = classified.get(ann.id) if ind is not None else None
                obs_id = ann.observation_key or fallback_id("ann", ann.id, ann.content_hash,
                                                            stored=observation_keys)
                obs = observation_row(ann, photo, row, observation_id=obs_id, event_id=event_id,
                                      species=species.get(ann.species_id), individual=ind, classified=how)
                if _is_event_level(ann):  # written once for its whole event, below
                    oid = str((ann.observation_details or {}).get("observationID") or obs_id.split("@")[0])
                    events.setdefault((oid, ind.id if ind is not None else None), []).append((ann, obs))
                else:
                    observations.append(obs)
                if ind is not None:
                    named.add(ind.name)
                if obs.get("classificationMethod") == "human" and obs.get("classifiedBy"):
                    curators.add(obs["classifiedBy"])
            observations.extend(_extra_observations(photo, row, event_id))
    event_rows = event_level_rows(events)
    observations.extend(event_rows)
    refuse_unnamed_species((o.get("scientificName") for o in observations), export="The Camtrap DP export",
                           what="observation(s)")
    if people == "keep" and include_media and result.photos_with_people:
        record_people_kept(cat, user=user, export="camtrap-dp", out=str(out), photos=result.photos_with_people)
    created = now or datetime.now(timezone.utc)
    label = title or f"Rosette catalogue {cat.data_dir.name}"
    contributors = [{"title": user, "role": "contact"}] + [{"title": c, "role": "contributor"}
                                                           for c in sorted(curators - {user})]
    meta = PackageMetadata(title=label, created=created, contributors=contributors, project_title=label,
                           sampling_design=sampling_design,
                           observation_level=("media", "event") if event_rows else ("media",),
                           description="Exported by Rosette: one observation per annotated animal; individualID "
                                       "is the catalogue's identity, classifiedBy who assigned it.")
    total = len(copies) + 1  # every photo file, then the check against the standard
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        written = write_package(out, meta, deployments=deployments, media=media, observations=observations,
                                common_names=common_names)
        if progress is not None:
            progress(0, total)
        for done, (source, rel, blur_boxes) in enumerate(copies, start=1):
            if should_cancel is not None and should_cancel():
                raise ExportCancelled(f"the Camtrap DP export was cancelled after {done - 1} of {len(copies)} "
                                      "photo(s); nothing of the package is kept")
            target = out / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            if blur_boxes:
                target.write_bytes(blurred_file(source, blur_boxes))
            else:
                shutil.copyfile(source, target)
            if progress is not None:
                progress(done, total)
    except BaseException as exc:  # a full disk, a vanished file, a cancel ...: no half-written package is left
        _remove_package(out, made=made)
        if is_disk_full(exc):
            raise CatalogueError(full_disk_words(out, what="the Camtrap DP package")) from None
        raise
    result.deployments, result.media = written.rows["deployments"], written.rows["media"]
    result.observations, result.individuals, result.media_files = written.rows["observations"], len(named), len(copies)
    result.people_observations = sum(1 for o in observations if o.get("observationType") == "human")
    result.event_observations = len(event_rows)
    result.problems = validate_package(out)
    if progress is not None:
        progress(total, total)
    return result


def export_package(cat: Catalogue, *, out: str | Path | None, zip: bool = False, user: str,
                   **options: Any) -> tuple[CamtrapDPExport, str | None]:
    """:func:`export_camtrap_dp` into ``out`` (None: a new folder under the data folder's exports), then, with
    ``zip``, packed into ``<out>.zip`` (what the Export tab offers for download); returns (what was written, the
    zip's path or None). ``options`` are :func:`export_camtrap_dp`'s."""
    if out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        folder = cat.data_dir / "exports" / f"camtrap-dp-{stamp}"
    else:
        folder = Path(out).expanduser()
    made = not folder.exists()
    done = export_camtrap_dp(cat, folder, user=user, **options)
    if not zip:
        return done, None
    try:
        return done, shutil.make_archive(str(folder), "zip", root_dir=folder)
    except BaseException as exc:  # a half-written zip is no package: neither it nor its folder is kept
        Path(f"{folder}.zip").unlink(missing_ok=True)
        _remove_package(folder, made=made)
        if is_disk_full(exc):
            raise CatalogueError(full_disk_words(Path(f"{folder}.zip"), what="the Camtrap DP package's zip")) from None
        raise


def full_disk_words(target: Path, *, what: str) -> str:
    """A full disk met while writing ``what`` at ``target``, said of the target: the operating system's error
    names the file it was copying *from* (the catalogue's own photo), which is not the disk that is full."""
    return (f"the disk is full where {what} is written ({target}); nothing of it was kept: free some space there "
            "or choose a folder on another disk")


def _remove_package(out: Path, *, made: bool) -> None:
    """Remove what an export wrote into ``out``: the folder itself when the export made it, else its contents
    (the folder was there, empty, before)."""
    if made:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in list(out.iterdir()) if out.is_dir() else []:
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
