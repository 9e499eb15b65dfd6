"""Camtrap DP 1.x packages (TDWG's camera-trap data package): ``datapackage.json`` with the ``deployments``,
``media`` and ``observations`` CSV resources, read from the JSON itself, its folder or a zip.

:func:`read_camtrapdp` checks the profile, the resources, their columns and the ids, and turns the package into
what an import needs (pure: files in, dataclasses out): the deployments, one :class:`Entry` per media row, each
media row's observations (:class:`MediaObservations`) and the species' common names. Bad input gets a message
naming what was found and loses nothing: unreadable media and observations are report lines (the rest imports);
a package Rosette cannot read at all is a :class:`CamtrapDPError`.

How rows map to entries and annotations, and how event-level observations apply: docs/camtrapdp.md."""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from core.annotations import Box, InvalidBoxError
from core.readers.camtrapdp_schema import check_against_schemas
from core.readers.base import (
    Entry,
    ManifestError,
    ReadError,
    Tree,
    oversized,
    tree_opener,
    tree_reader,
    unsafe_reason,
)
from core.readers.folder import FolderTree
from core.readers.megadetector import ROUNDING_TOLERANCE
from core.readers.report import IngestItemResult
from core.readers.zipped import ZipTree
from core.field.stations import DeploymentSpec, StationError, check_unique_ids, deployment_spec, parse_timestamp

#: The package descriptor's file name.
DATAPACKAGE_NAME = "datapackage.json"
#: Profiles read: TDWG's Camtrap DP 1.x profile URLs (1.0, 1.0.1, 1.0.2, ...).
PROFILE_PATTERN = re.compile(
    r"^https?://(raw\.githubusercontent\.com/tdwg/camtrap-dp/|rs\.gbif\.org/sandbox/data-packages/camtrap-dp/)"
    r"1\.\d+(\.\d+)?/camtrap-dp-profile\.json$")
EXAMPLE_PROFILE = "https://raw.githubusercontent.com/tdwg/camtrap-dp/1.0/camtrap-dp-profile.json"
#: The resources read, and the columns each must have (the others are optional).
REQUIRED_COLUMNS = {
    "deployments": ("deploymentID", "deploymentStart", "deploymentEnd"),
    "media": ("mediaID", "deploymentID", "timestamp", "filePath"),
    "observations": ("observationID", "deploymentID", "observationLevel", "observationType"),
}
#: Observation columns stored in their own place (the annotation's box, key, species, individual, life stage,
#: sex; the photo it is on); every other column is kept in the annotation's details.
OBSERVATION_COLUMNS = ("observationID", "mediaID", "scientificName", "individualID", "lifeStage", "sex",
                       "bboxX", "bboxY", "bboxWidth", "bboxHeight")
#: Media columns stored in their own place (the photo's media key, deployment, time and name).
MEDIA_COLUMNS = ("mediaID", "deploymentID", "timestamp", "filePath")
BBOX_COLUMNS = ("bboxX", "bboxY", "bboxWidth", "bboxHeight")
#: Camtrap DP 1.0 vocabularies (the catalogue keeps these words).
LIFE_STAGES = ("adult", "subadult", "juvenile", "unknown")
SEXES = ("female", "male", "unknown")
#: Observation types that may hide an animal nobody has named yet: such media come in for review.
UNCLASSIFIED_TYPES = ("unknown", "unclassified")
#: Largest datapackage.json / CSV read (bytes).
MAX_TABLE_BYTES = 512 * 1024 * 1024
#: Most ids named in one report line.
SHOWN = 5


class CamtrapDPError(ManifestError):
    """A Camtrap DP package Rosette cannot import at all (profile, resources, columns, ids); the message names
    what it found. Nothing was imported."""


@dataclass(frozen=True)
class Observation:
    """One Camtrap DP observation as it applies to one media row."""

    key: str  # the annotation's observation key: observationID, or observationID@mediaID for an event-level one
    observation_id: str
    level: str  # media | event
    type: str  # animal | human | vehicle | blank | unknown | unclassified
    box: Box | None  # normalised, origin top-left; None: no box (the whole photo)
    scientific_name: str | None = None
    individual: str | None = None  # individualID
    life_stage: str | None = None
    sex: str | None = None
    details: Mapping[str, str] = field(default_factory=dict)  # the other columns, as they came


@dataclass(frozen=True)
class MediaObservations:
    """What the observations say about one media row."""

    animals: tuple[Observation, ...] = ()  # one annotation each
    people: tuple[Box, ...] = ()  # 'human' boxes: blurred in thumbnails, never catalogued
    others: tuple[Observation, ...] = ()  # observations that make no annotation (blank, human, vehicle, ...)

    @property
    def is_empty(self) -> bool:
        """Observed, and nothing there that could be an animal (blank, humans, vehicles only)."""
        observed = self.animals or self.others
        return bool(observed) and not self.animals and not any(o.type in UNCLASSIFIED_TYPES for o in self.others)


@dataclass
class CamtrapPackage:
    """A Camtrap DP package read for an import (close ``tree`` afterwards)."""

    label: str
    profile: str
    tree: Tree
    deployments: list[DeploymentSpec]
    entries: list[Entry]
    observations: dict[str, MediaObservations]  # by entry name (its filePath)
    problems: list[IngestItemResult]  # lines about the package itself (URLs, missing media, ...)
    common_names: dict[str, str] = field(default_factory=dict)  # English common name by scientificName (taxonomic)

    def summary(self) -> str:
        animals = sum(len(m.animals) for m in self.observations.values())
        empty = sum(1 for m in self.observations.values() if m.is_empty)
        return (f"Camtrap DP package {self.label}: {len(self.deployments)} deployments, {len(self.entries)} media, "
                f"{animals} animal observations on them, {empty} media with no animal (blank, people, vehicles)")


def is_camtrap_profile(profile: object) -> bool:
    """Whether a datapackage.json ``profile`` names TDWG's Camtrap DP 1.x."""
    return isinstance(profile, str) and PROFILE_PATTERN.match(profile.strip()) is not None


def _about(name: str, status: str, message: str) -> IngestItemResult:
    """A report line about the package as a whole or some of its rows (not one media file's own line)."""
    return IngestItemResult(name, status, message, about_import=True)


def _offset_text(offset: timedelta) -> str:
    """A UTC offset as written in a timestamp: ``+02:00``, ``-04:30``."""
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def _shown(items: Sequence[str]) -> str:
    return ", ".join(repr(i) for i in items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


# --------------------------------------------------------------------------- the package and its tables


def open_package(path: Path | str) -> tuple[Tree, str]:
    """The tree holding the package and the descriptor's path in it, for a datapackage.json, its folder or a zip."""
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such file or folder")
    if p.is_dir():
        if not (p / DATAPACKAGE_NAME).is_file():
            raise CamtrapDPError(f"{p}: no {DATAPACKAGE_NAME} in this folder; a Camtrap DP package is a "
                                 f"{DATAPACKAGE_NAME} with its CSV files (or a zip of them)")
        return FolderTree(p), DATAPACKAGE_NAME
    if p.suffix.lower() == ".zip" or (p.name != DATAPACKAGE_NAME and zipfile.is_zipfile(p)):
        tree = ZipTree(p)
        if not tree.has(DATAPACKAGE_NAME):
            tree.close()
            raise CamtrapDPError(f"{p.name}: the zip holds no {DATAPACKAGE_NAME} at its top (or inside a single "
                                 "top folder); a Camtrap DP zip is the package's folder zipped")
        return tree, DATAPACKAGE_NAME
    return FolderTree(p.parent), p.name


def _descriptor(tree: Tree, rel: str, *, label: str) -> dict[str, Any]:
    try:
        data = tree.read(rel)
    except ReadError as exc:
        raise CamtrapDPError(f"{label}: {exc}") from None
    try:
        descriptor = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise CamtrapDPError(f"{label}: not UTF-8 text (expected the package's JSON descriptor)") from None
    except json.JSONDecodeError as exc:
        raise CamtrapDPError(f"{label}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") \
            from None
    if not isinstance(descriptor, dict):
        raise CamtrapDPError(f"{label}: the JSON is not an object with 'profile' and 'resources'")
    return descriptor


def common_names(descriptor: Mapping[str, Any]) -> dict[str, str]:
    """The English common names the descriptor's ``taxonomic`` entries give (``vernacularNames.eng``), by scientific
    name. Other languages are not read (a catalogue holds one common name, in English); an entry not shaped as the
    profile says is skipped here and named by the check against the profile."""
    taxa = descriptor.get("taxonomic")
    out: dict[str, str] = {}
    for taxon in taxa if isinstance(taxa, list) else []:
        if not isinstance(taxon, Mapping):
            continue
        name, names = taxon.get("scientificName"), taxon.get("vernacularNames")
        english = names.get("eng") if isinstance(names, Mapping) else None
        if isinstance(name, str) and name.strip() and isinstance(english, str) and english.strip():
            out[name] = english
    return out


def check_profile(descriptor: Mapping[str, Any], *, label: str) -> str:
    """The descriptor's profile when it is Camtrap DP 1.x, else CamtrapDPError naming what it is."""
    profile = descriptor.get("profile")
    if not is_camtrap_profile(profile):
        found = "no 'profile'" if profile is None else f"profile {profile!r}"
        raise CamtrapDPError(f"{label}: {found}; Rosette reads Camtrap DP 1.x packages, whose profile is a TDWG "
                             f"camtrap-dp 1.x profile URL such as {EXAMPLE_PROFILE} (also 1.0.1, 1.0.2)")
    return str(profile).strip()


def _resource_path(descriptor: Mapping[str, Any], name: str, *, label: str) -> str:
    resources = descriptor.get("resources")
    if not isinstance(resources, list):
        raise CamtrapDPError(f"{label}: no 'resources' list; a Camtrap DP package lists its deployments, media "
                             "and observations tables there")
    found = [r for r in resources if isinstance(r, dict) and r.get("name") == name]
    if not found:
        names = [str(r.get("name")) for r in resources if isinstance(r, dict)]
        raise CamtrapDPError(f"{label}: no '{name}' resource (found: {', '.join(names) or 'none'}); a Camtrap DP "
                             "package needs deployments, media and observations; nothing was imported")
    path = found[0].get("path")
    if isinstance(path, list) and len(path) == 1:
        path = path[0]
    if not isinstance(path, str) or not path.strip():
        raise CamtrapDPError(f"{label}: the '{name}' resource has no single 'path' (got {path!r})")
    if re.match(r"^[a-z][a-z0-9+.-]*://", path.strip(), re.IGNORECASE):
        raise CamtrapDPError(f"{label}: the '{name}' resource is a URL ({path}); Rosette reads packages offline: "
                             "download the CSV next to datapackage.json and make its path relative")
    reason = unsafe_reason(path)
    if reason:
        raise CamtrapDPError(f"{label}: the '{name}' resource's path {path!r} is refused ({reason} of the package)")
    return path.strip()


def read_table(tree: Tree, rel: str, *, name: str, label: str) -> list[dict[str, str]]:
    """The rows of one CSV resource (UTF-8, comma separated, a header line), cells stripped, the columns as
    written; CamtrapDPError naming the resource when it is missing, unreadable or lacks required columns."""
    if not tree.has(rel):
        raise CamtrapDPError(f"{label}: the '{name}' resource's file {rel!r} is not in the package; "
                             "nothing was imported")
    try:
        data = tree.read(rel)
    except ReadError as exc:
        raise CamtrapDPError(f"{label}: {rel}: {exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CamtrapDPError(f"{label}: {rel} is not UTF-8 text (Camtrap DP tables are UTF-8 CSV)") from None
    _check_delimiter(text, rel=rel, name=name, label=label)
    reader = csv.reader(io.StringIO(text))
    try:
        rows = [r for r in reader if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise CamtrapDPError(f"{label}: {rel} is not a readable CSV file ({exc})") from None
    if not rows:
        raise CamtrapDPError(f"{label}: {rel} is empty (no header line)")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in REQUIRED_COLUMNS[name] if c not in header]
    if missing:
        raise CamtrapDPError(f"{label}: {rel} ({name}) lacks the column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(missing)} (found: {', '.join(h for h in header if h) or 'none'}); "
                             "nothing was imported")
    return [{header[i]: cell.strip() for i, cell in enumerate(r[:len(header)]) if header[i]} for r in rows[1:]]


#: Separators a spreadsheet may have saved a table with instead of commas, and their names.
OTHER_DELIMITERS = {";": "semicolons (';')", "\t": "tabs", "|": "vertical bars ('|')"}


def _check_delimiter(text: str, *, rel: str, name: str, label: str) -> None:
    """Refuse a table whose header line is separated by something other than commas (a spreadsheet in a
    semicolon locale saves CSV so): read as commas, each row would be one column and every cell misread."""
    header = next((line for line in text.splitlines() if line.strip()), "")
    commas = header.count(",")
    for delimiter, words in OTHER_DELIMITERS.items():
        if header.count(delimiter) > commas:
            raise CamtrapDPError(f"{label}: {rel} ({name}) is separated by {words}, not commas: Camtrap DP tables "
                                 f"are comma-separated CSV (header found: {header[:120]!r}); save it again as "
                                 "comma-separated CSV and import again; nothing was imported")


# --------------------------------------------------------------------------- observations


def _box(row: Mapping[str, str], *, what: str) -> tuple[Box | None, str | None]:
    """The observation's box (None when it has none) and why its box cells cannot be used, if so (what is done
    instead: :func:`_box_consequence`)."""
    cells = [row.get(c, "") for c in BBOX_COLUMNS]
    if not any(cells):
        return None, None
    if not all(cells):
        return None, f"{what}: only some of bboxX, bboxY, bboxWidth, bboxHeight are given ({cells})"
    try:
        x, y, w, h = (float(c) for c in cells)
        # an edge at most ROUNDING_TOLERANCE past the frame is rounding (as in MegaDetector output): clipped
        if -ROUNDING_TOLERANCE <= x < 0:
            x, w = 0.0, w + x
        if -ROUNDING_TOLERANCE <= y < 0:
            y, h = 0.0, h + y
        if 1 < x + w <= 1 + ROUNDING_TOLERANCE:
            w = 1.0 - x
        if 1 < y + h <= 1 + ROUNDING_TOLERANCE:
            h = 1.0 - y
        return Box(x, y, w, h), None
    except (ValueError, InvalidBoxError) as exc:
        return None, f"{what}: box {cells} cannot be used ({exc})"


def _box_consequence(observation_type: str) -> str:
    """What an import does with an observation whose box cannot be used, in the report's words."""
    if observation_type == "human":
        return ("; this person cannot be blurred by its box: the photo's thumbnails show it (the box cells are kept "
                "in the photo's media details)")
    if observation_type == "animal":
        return "; imported as a whole-photo annotation, its box cells kept in its details"
    return "; its box cells are kept in the photo's media details"


def refused_boxes(facts: MediaObservations) -> tuple[str, ...]:
    """Why each animal observation's box on this media row could not be used (each is a whole-photo annotation)."""
    return tuple(problem for obs in facts.animals if obs.box is None and any(c in obs.details for c in BBOX_COLUMNS)
                 for problem in [_box(obs.details, what=f"observation {obs.observation_id!r}")[1]] if problem)


def _word(value: str, allowed: Sequence[str]) -> str | None:
    word = value.strip().lower()
    return word if word in allowed else None


def _observation(row: Mapping[str, str], *, key: str, warnings: list[str]) -> Observation:
    oid = row["observationID"]
    what = f"observation {oid!r}"
    box, problem = _box(row, what=what)
    if problem:
        warnings.append(problem + _box_consequence((row.get("observationType") or "").strip().lower()))
    details = {k: v for k, v in row.items() if v != "" and k not in OBSERVATION_COLUMNS}
    if problem:  # nothing lost: the box cells travel in the details
        details.update({c: row[c] for c in BBOX_COLUMNS if row.get(c)})
    life_stage = _word(row.get("lifeStage", ""), LIFE_STAGES)
    sex = _word(row.get("sex", ""), SEXES)
    for column, value, kept in (("lifeStage", row.get("lifeStage", ""), life_stage), ("sex", row.get("sex", ""), sex)):
        if value and kept is None:
            allowed = LIFE_STAGES if column == "lifeStage" else SEXES
            warnings.append(f"{what}: {column} {value!r} is not one of {', '.join(allowed)}; kept in its details")
            details[column] = value
    if key != oid:
        details["observationID"] = oid
    return Observation(key=key, observation_id=oid, level=row["observationLevel"].strip().lower(),
                       type=row["observationType"].strip().lower() or "unclassified", box=box,
                       scientific_name=row.get("scientificName") or None, individual=row.get("individualID") or None,
                       life_stage=life_stage, sex=sex, details=details)


def as_row(obs: Observation) -> dict[str, str]:
    """An observation back as a Camtrap DP observations row (its non-empty cells; mediaID left out)."""
    row = {"observationID": obs.observation_id, **obs.details}
    for column, value in (("scientificName", obs.scientific_name), ("individualID", obs.individual),
                          ("lifeStage", obs.life_stage), ("sex", obs.sex)):
        if value is not None:
            row[column] = value
    if obs.box is not None:
        row.update(zip(BBOX_COLUMNS, (f"{v:g}" for v in obs.box.as_list())))
    return row


def _time(text: str, spec: DeploymentSpec | None, *, what: str) -> datetime | None:
    try:
        return parse_timestamp(text, default_offset=spec.offset if spec else None, what=what).when
    except StationError:
        return None


# --------------------------------------------------------------------------- the whole package


def read_camtrapdp(path: Path | str) -> CamtrapPackage:
    """Read a Camtrap DP 1.x package (its datapackage.json, its folder or a zip); docs/camtrapdp.md says how it maps.

    Raises CamtrapDPError (nothing imported) for a package it cannot read at all, FileNotFoundError for a path
    that is not there. The caller closes ``package.tree``.
    """
    tree, rel = open_package(path)
    try:
        return _read(tree, rel, label=Path(path).name)
    except BaseException:
        tree.close()
        raise


def _read(tree: Tree, rel: str, *, label: str) -> CamtrapPackage:
    descriptor = _descriptor(tree, rel, label=label)
    profile = check_profile(descriptor, label=label)
    base_dir = str(PurePosixPath(rel).parent)
    base = "" if base_dir in ("", ".") else base_dir + "/"
    paths = {name: base + _resource_path(descriptor, name, label=label) for name in ("deployments", "media",
                                                                                      "observations")}
    tables = {name: read_table(tree, path, name=name, label=label) for name, path in paths.items()}
    for name, column in (("deployments", "deploymentID"), ("media", "mediaID"), ("observations", "observationID")):
        empty = [str(i + 2) for i, r in enumerate(tables[name]) if not r.get(column)]
        if empty:
            raise CamtrapDPError(f"{label}: {name} row(s) {', '.join(empty[:SHOWN])} (the header is row 1) have "
                                 f"no {column}; "
                                 "nothing was imported")
        try:
            check_unique_ids([r[column] for r in tables[name]], what=f"{column}s in {name}")
        except StationError as exc:
            raise CamtrapDPError(f"{label}: {exc}; every row needs its own id: nothing was imported") from None
    _check_individual_species(tables["observations"], label=label)
    deployments: dict[str, DeploymentSpec] = {}
    for row in tables["deployments"]:
        try:
            spec = deployment_spec(row)
        except StationError as exc:
            raise CamtrapDPError(f"{label}: {exc}; nothing was imported") from None
        deployments[spec.key] = spec
    problems: list[IngestItemResult] = []
    media_rows = {r["mediaID"]: r for r in tables["media"]}

    # observations: media-level ones by media, event-level ones by event (or by their time window)
    by_media: dict[str, list[dict[str, str]]] = {}
    event_rows: list[dict[str, str]] = []
    orphans: list[str] = []
    bad_level: list[str] = []
    for row in tables["observations"]:
        level = row["observationLevel"].strip().lower()
        if level == "media":
            if row.get("mediaID") in media_rows:
                by_media.setdefault(row["mediaID"], []).append(row)
            else:
                orphans.append(f"{row['observationID']} (mediaID {row.get('mediaID') or 'empty'!r})")
        elif level == "event":
            event_rows.append(row)
        else:
            bad_level.append(f"{row['observationID']} ({row['observationLevel']!r})")
    if orphans:
        problems.append(_about(label, "error", f"{len(orphans)} observation(s) point to media the package "
                                         f"does not list, not imported: {', '.join(orphans[:SHOWN])}"
                                         + (f" and {len(orphans) - SHOWN} more" if len(orphans) > SHOWN else "")))
    if bad_level:
        problems.append(_about(label, "error", f"{len(bad_level)} observation(s) have an observationLevel "
                                         "other than 'media' or 'event', not imported: "
                                         + ", ".join(bad_level[:SHOWN])))

    # each media row's time and event
    times: dict[str, datetime | None] = {}
    media_event: dict[str, str | None] = {}
    for mid, row in media_rows.items():
        spec = deployments.get(row["deploymentID"])
        times[mid] = _time(row["timestamp"], spec, what=f"media {mid!r} timestamp")
        event = row.get("eventID") or next((o.get("eventID") for o in by_media.get(mid, []) if o.get("eventID")),
                                           None)
        media_event[mid] = event or None
    # each deployment's media in time order: an event-level observation's window finds its media by bisection
    timeline: dict[str, list[tuple[datetime, str]]] = {}
    for mid, row in media_rows.items():
        if times[mid] is not None:
            timeline.setdefault(row["deploymentID"], []).append((times[mid], mid))
    for line in timeline.values():
        line.sort()
    starts = {dep: [t for t, _ in line] for dep, line in timeline.items()}
    windows: dict[str, list[str]] = {}  # observationID of an event-level observation -> its media in its window
    for row in event_rows:
        spec = deployments.get(row["deploymentID"])
        start = _time(row.get("eventStart", ""), spec, what="eventStart")
        end = _time(row.get("eventEnd", ""), spec, what="eventEnd")
        line = timeline.get(row["deploymentID"], [])
        inside: list[str] = []
        if start is not None and end is not None:
            i = bisect_left(starts.get(row["deploymentID"], []), start)
            while i < len(line) and line[i][0] <= end:
                inside.append(line[i][1])
                i += 1
        windows[row["observationID"]] = inside
        for mid in inside:  # a media row naming no event joins the event whose window holds its time
            if media_event[mid] is None and row.get("eventID"):
                media_event[mid] = row["eventID"]
    by_event: dict[str, list[str]] = {}
    for mid, ev in media_event.items():
        if ev:
            by_event.setdefault(ev, []).append(mid)
    event_obs: dict[str, list[dict[str, str]]] = {}
    unmatched: list[str] = []
    for row in event_rows:
        if row.get("eventID"):
            mids = [m for m in by_event.get(row["eventID"], []) if media_rows[m]["deploymentID"] == row["deploymentID"]]
        else:
            mids = windows[row["observationID"]]
        if not mids:
            unmatched.append(f"{row['observationID']} (event {row.get('eventID') or 'without eventID'!r})")
        for m in mids:
            event_obs.setdefault(m, []).append(row)
    if unmatched:
        problems.append(_about(label, "error", f"{len(unmatched)} event-level observation(s) match no media "
                                         f"of their deployment and event, not imported: {', '.join(unmatched[:SHOWN])}"
                                         + (f" and {len(unmatched) - SHOWN} more" if len(unmatched) > SHOWN else "")))
    event_dates = {ev: min((times[m] for m in mids if times[m] is not None), default=None)
                   for ev, mids in by_event.items()}

    entries: list[Entry] = []
    observations: dict[str, MediaObservations] = {}
    urls: list[str] = []
    names: dict[str, str] = {}
    found = _Findings()
    box_lines: list[IngestItemResult] = []
    media_row = {r["mediaID"]: i + 2 for i, r in enumerate(tables["media"])}  # the header is row 1
    obs_row = {r["observationID"]: i + 2 for i, r in enumerate(tables["observations"])}
    for mid, row in media_rows.items():
        file_path = row["filePath"]
        if re.match(r"^https?://", file_path, re.IGNORECASE):
            urls.append(mid)
            continue
        name = file_path.replace("\\", "/")
        while name.startswith("./"):
            name = name[2:]
        if not name:
            entries.append(Entry(f"media {mid}", error=f"media {mid!r} has no filePath"))
            continue
        reason = unsafe_reason(name)
        if reason:
            entries.append(Entry(name, error=f"media {mid!r}: filePath refused ({reason} of the package)"))
            continue
        if name in names:
            entries.append(Entry(f"{name} (media {mid})", error=f"media {mid!r} has the same filePath as media "
                                 f"{names[name]!r}; one file cannot be two media rows: not imported"))
            continue
        names[name] = mid
        entry, warnings = _media_entry(row, name=name, deployments=deployments, when=times[mid],
                                       event=media_event[mid], event_date=event_dates.get(media_event[mid] or ""),
                                       found=found, row_name=f"{mid} (row {media_row[mid]})")
        facts = _media_observations(by_media.get(mid, []), event_obs.get(mid, []), media_id=mid, warnings=warnings)
        box_lines.extend(_box_lines(name, facts, rows=obs_row, media_id=mid))
        if facts.others:  # nothing lost: what made no annotation travels with the photo
            entry.media_details = {**(entry.media_details or {}), "observations": [as_row(o) for o in facts.others]}
        species = {o.scientific_name for o in facts.animals if o.scientific_name}
        entry.species = species.pop() if len(species) == 1 else None
        if not tree.has(base + name):
            entry.read, entry.error = None, (f"media {mid!r}: its file {name!r} is not in the package (filePath is "
                                             "relative to datapackage.json)")
        elif too_large := oversized(tree.size(base + name)):
            entry.read, entry.error = None, f"media {mid!r}: {too_large}"
        else:
            # streamed: a large media file (a video, a huge TIFF) is never whole in memory
            entry.read, entry.open = tree_reader(tree, base + name), tree_opener(tree, base + name)
        entry.warning = "; ".join(warnings) or None
        entries.append(entry)
        observations[entry.name] = facts
    if urls:
        problems.append(_about(label, "error", f"{len(urls)} media are given only as URLs (filePath "
                                         f"http(s)://..., e.g. media {_shown(urls)}): Rosette reads files, it does "
                                         "not download. Download them next to datapackage.json, make their filePath "
                                         "relative (e.g. media/IMG_0001.JPG) and import again; they and their "
                                         "observations were not imported"))
    problems.extend(_finding_lines(found, label=label))
    problems.extend(box_lines)
    problems.extend(_coordinates_line(list(deployments.values()), label=label))
    problems.extend(check_against_schemas(tree, descriptor, paths, label=label))  # after the reader's own checks
    return CamtrapPackage(label=label, profile=profile, tree=tree, deployments=list(deployments.values()),
                          entries=entries, observations=observations, problems=problems,
                          common_names=common_names(descriptor))


def _check_individual_species(rows: Sequence[Mapping[str, str]], *, label: str) -> None:
    """Refuse a package that gives one individualID two species (its observations' scientificName): one of them
    is a typing slip, and importing would put one animal in two species or refuse its rows half way."""
    species: dict[str, dict[str, list[str]]] = {}
    for i, row in enumerate(rows):
        individual, name = row.get("individualID", ""), row.get("scientificName", "")
        if individual and name:
            species.setdefault(individual, {}).setdefault(name, []).append(f"{row['observationID']} (row {i + 2})")
    mixed = [(ind, names) for ind, names in species.items() if len(names) > 1]
    if not mixed:
        return
    words = "; ".join(f"individualID {ind!r} is " + " and ".join(
        f"{name!r} in observation{'s' if len(obs) > 1 else ''} {', '.join(obs[:SHOWN])}"
        + (f" and {len(obs) - SHOWN} more" if len(obs) > SHOWN else "") for name, obs in names.items())
        for ind, names in mixed[:SHOWN])
    more = f" (and {len(mixed) - SHOWN} more individuals)" if len(mixed) > SHOWN else ""
    raise CamtrapDPError(f"{label}: observations.csv gives {len(mixed)} individual(s) two species: {words}{more} "
                         "(the header is row 1); one individual is one species: correct these rows' scientificName "
                         "or individualID and import again; nothing was imported")


@dataclass
class _Findings:
    """What the media rows needed done to them, for one report line each kind (the rows named)."""

    assumed: dict[str, list[str]] = field(default_factory=dict)  # offset taken -> media without a UTC offset
    outside: list[str] = field(default_factory=list)  # media taken outside their deployment's active period
    unknown: list[str] = field(default_factory=list)  # media whose deploymentID the package does not list
    missing: list[str] = field(default_factory=list)  # media without a deploymentID


def _listed(items: Sequence[str]) -> str:
    return ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")


def _finding_lines(found: _Findings, *, label: str) -> list[IngestItemResult]:
    lines = []
    for offset, mids in found.assumed.items():
        lines.append(_about(label, "note", f"{len(mids)} media timestamp(s) have no UTC offset: taken as their "
                            f"deployment's local time, UTC{offset} (the offset of its deploymentStart): "
                            f"{_listed(mids)}; each keeps the timestamp as written in its media details"))
    for rows, why in ((found.outside, "were taken outside every active period of their deployment"),
                      (found.unknown, "name a deploymentID the package's deployments do not list"),
                      (found.missing, "have no deploymentID")):
        if rows:
            lines.append(_about(label, "note", f"{len(rows)} media {why}: {_listed(rows)}; imported without a "
                                "deployment (the deploymentID, when given, is kept in their media details), so "
                                "the population study does not count them until they are linked"))
    return lines


def _coordinates_line(deployments: Sequence[DeploymentSpec], *, label: str) -> list[IngestItemResult]:
    bare = [d.key for d in deployments if d.lat is None]
    if not bare:
        return []
    return [_about(label, "note", f"{len(bare)} deployment(s) have no coordinates (latitude, longitude): "
                   f"{_shown(bare)}; stored without a position. Maps, home ranges, capthist (trap coordinates) and "
                   "the Camtrap DP export need them: add them with 'rosette deployments edit ID --lat .. --lon ..'")]


def _box_lines(name: str, facts: MediaObservations, *, rows: Mapping[str, int],
               media_id: str) -> list[IngestItemResult]:
    """One line per observation box that could not be used (out of the frame, partial, not numbers)."""
    lines = []
    for obs in (*facts.animals, *facts.others):
        if obs.box is None and any(c in obs.details for c in BBOX_COLUMNS):
            _, problem = _box(obs.details, what=f"observation {obs.observation_id!r} "
                                                f"(observations row {rows.get(obs.observation_id, '?')})")
            words = (problem or f"observation {obs.observation_id!r}: its box cannot be used") + _box_consequence(
                obs.type if obs in facts.animals or obs.type != "animal" else "other")
            lines.append(_about(name, "error", f"media {media_id!r}: {words}"))
    return lines


def _media_entry(row: Mapping[str, str], *, name: str, deployments: Mapping[str, DeploymentSpec],
                 when: datetime | None, event: str | None, event_date: datetime | None, found: _Findings,
                 row_name: str) -> tuple[Entry, list[str]]:
    """The entry of one media row and the warnings about it (time zone taken, outside its deployment), each also
    noted in ``found`` under ``row_name`` for the package's report lines."""
    mid, dep = row["mediaID"], row["deploymentID"]
    spec = deployments.get(dep)
    warnings: list[str] = []
    details = {k: v for k, v in row.items() if v != "" and k not in MEDIA_COLUMNS}
    deployment: str | None = dep
    taken_at: str | None = None
    if spec is None and not dep:
        warnings.append("it has no deploymentID: imported without a deployment")
        found.missing.append(row_name)
        deployment = None
    elif spec is None:
        warnings.append(f"its deploymentID {dep!r} is not among the package's deployments: imported without a "
                        "deployment (the id is kept in its media details)")
        details["deploymentID"], deployment = dep, None
        found.unknown.append(f"{row_name} deploymentID {dep!r}")
    try:
        parsed = parse_timestamp(row["timestamp"], default_offset=spec.offset if spec else None,
                                 what=f"media {mid!r} timestamp")
    except StationError as exc:
        warnings.append(f"{exc}; imported without a time (kept in its media details)")
        details["timestamp"] = row["timestamp"]
        parsed = None
    if parsed is not None:
        taken_at = parsed.iso()
        if parsed.offset_assumed:
            warnings.append(f"timestamp {row['timestamp']!r} has no time zone: taken as deployment {dep!r}'s "
                            f"local time ({taken_at})")
            details["timestamp"] = row["timestamp"]
            found.assumed.setdefault(_offset_text(parsed.when.utcoffset() or timedelta(0)), []).append(row_name)
        if spec is not None and not spec.active_at(parsed.when):
            warnings.append(f"taken {taken_at}, outside deployment {dep!r}'s active period ({spec.start.isoformat()} "
                            f"to {spec.end.isoformat()}): imported without a deployment (the id is kept in its "
                            "media details)")
            details["deploymentID"], deployment = dep, None
            found.outside.append(f"{row_name} of {dep!r}, taken {taken_at}")
    sighting = None
    if event:
        facts: dict[str, Any] = {"date": event_date.isoformat() if event_date else None, "place": None, "lat": None,
                                 "lon": None, "camera": None, "observer": None}
        if spec is not None:
            facts.update(place=spec.location_name or spec.location_id, lat=spec.lat, lon=spec.lon,
                         camera=spec.camera_id)
        sighting = {"key": f"camtrap-dp:{event}"[:200], **facts, "event_key": event[:200], "deployment": deployment}
    entry = Entry(name, deployment=deployment, taken_at=taken_at, media_key=mid, media_details=details or None,
                  sighting=sighting)
    return entry, warnings


def _media_observations(media_level: Sequence[Mapping[str, str]], event_level: Sequence[Mapping[str, str]], *,
                        media_id: str, warnings: list[str]) -> MediaObservations:
    """A media row's observations: its own (media level) and its event's (event level). When the media row has
    animal observations of its own, its event's animal observations describe the same animals at a coarser level
    (Agouti writes both): they are kept with the others, not made into second annotations of the same animal."""
    animals: list[Observation] = []
    people: list[Box] = []
    others: list[Observation] = []
    own_animals = any((r.get("observationType") or "").strip().lower() == "animal" for r in media_level)
    for row, key in [(r, r["observationID"]) for r in media_level] + \
                    [(r, f"{r['observationID']}@{media_id}") for r in event_level]:
        obs = _observation(row, key=key, warnings=warnings)
        if obs.type == "animal" and not (own_animals and obs.level == "event"):
            animals.append(obs)
            continue
        others.append(obs)
        if obs.type == "human" and obs.box is not None:
            people.append(obs.box)
    return MediaObservations(animals=tuple(animals), people=tuple(people), others=tuple(others))
