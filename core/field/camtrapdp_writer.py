"""Camtrap DP 1.0 packages written and validated offline (docs/DESIGN.md section 8).

Pure: rows (plain dicts keyed by the Camtrap DP column names) in, three CSV files and a ``datapackage.json`` out,
checked against the profile and table schemas shipped in ``core/field/schemas/camtrap-dp/<version>/`` so nothing
is fetched. Problems come back as :class:`PackageProblem`. Cells are written as they are (no spreadsheet
defusing): a package is data exchange, and an import must get the same values back. What is validated and how the
schema URLs resolve offline: docs/camtrapdp.md."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any

import frictionless
import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource
from referencing.jsonschema import DRAFT4

#: The Camtrap DP version Rosette writes (1.0.2: the 1.0 standard with its documentation fixes).
CAMTRAP_DP_VERSION = "1.0.2"
OFFICIAL_BASE = f"https://raw.githubusercontent.com/tdwg/camtrap-dp/{CAMTRAP_DP_VERSION}/"
PROFILE_URL = OFFICIAL_BASE + "camtrap-dp-profile.json"
TABLES = ("deployments", "media", "observations")
SCHEMA_URLS = {name: f"{OFFICIAL_BASE}{name}-table-schema.json" for name in TABLES}
SCHEMA_DIR = Path(__file__).resolve().parent / "schemas" / "camtrap-dp" / CAMTRAP_DP_VERSION

#: The outside schemas the profile refers to, and where they are read from offline.
DATA_PACKAGE_URL = "https://specs.frictionlessdata.io/schemas/data-package.json"
GEOJSON_URL = "http://json.schemastore.org/geojson.json"
GEOJSON_FILE = Path(frictionless.__file__).resolve().parent / "assets" / "profiles" / "geojson.json"

#: Camtrap DP's vocabularies of the project block (camtrap-dp-profile.json).
SAMPLING_DESIGNS = ("simpleRandom", "systematicRandom", "clusteredRandom", "experimental", "targeted",
                    "opportunistic")
CAPTURE_METHODS = ("activityDetection", "timeLapse")
DEFAULT_CAPTURE_METHOD = "activityDetection"  # what a photo stating no capture method is taken to be

#: File formats (PIL names, as the catalogue stores them) and their media types.
MEDIA_TYPES = {"JPEG": "image/jpeg", "PNG": "image/png", "TIFF": "image/tiff", "WEBP": "image/webp",
               "BMP": "image/bmp", "GIF": "image/gif", "MPO": "image/jpeg", "HEIF": "image/heif"}


class CamtrapDPError(ValueError):
    """A package that cannot be written; the message says what is missing."""


@dataclass(frozen=True)
class PackageProblem:
    """One thing that makes a package invalid: where (resource, row number as frictionless counts it, the
    header being row 1; field) and what."""

    resource: str | None
    message: str
    row: int | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = [self.resource or "datapackage.json"]
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.field:
            where.append(f"field {self.field}")
        return f"{', '.join(where)}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"resource": self.resource, "row": self.row, "field": self.field, "message": self.message}


@dataclass(frozen=True)
class PackageMetadata:
    """What the descriptor says about the package as a whole (the rest is computed from the rows)."""

    title: str
    created: datetime
    contributors: Sequence[Mapping[str, str]]  # {"title": name, "role": contact | contributor | ...}
    project_title: str
    sampling_design: str = "opportunistic"
    observation_level: Sequence[str] = ("media",)
    package_id: str | None = None
    description: str | None = None

    def __post_init__(self) -> None:
        if self.sampling_design not in SAMPLING_DESIGNS:
            raise CamtrapDPError(f"sampling design {self.sampling_design!r} is not one of Camtrap DP's: "
                                 f"{', '.join(SAMPLING_DESIGNS)}")
        if self.created.tzinfo is None:
            raise CamtrapDPError("the package's creation time needs a time zone")
        if not self.contributors:
            raise CamtrapDPError("a Camtrap DP package needs at least one contributor")


@dataclass
class WrittenPackage:
    """A package on disk: its descriptor and how many rows each table got."""

    folder: Path
    descriptor: dict[str, Any]
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def descriptor_path(self) -> Path:
        return self.folder / "datapackage.json"


# --------------------------------------------------------------------------- the shipped schemas


@cache
def _shipped(name: str) -> dict[str, Any]:
    path = SCHEMA_DIR / name
    if not path.is_file():
        raise CamtrapDPError(f"the Camtrap DP {CAMTRAP_DP_VERSION} file {name} is missing from {SCHEMA_DIR}; "
                             "reinstall Rosette")
    return json.loads(path.read_text(encoding="utf-8"))


def table_schema(name: str) -> dict[str, Any]:
    """The shipped Camtrap DP table schema of ``deployments``, ``media`` or ``observations`` (a fresh copy)."""
    if name not in TABLES:
        raise CamtrapDPError(f"Camtrap DP has no table {name!r}; its tables are {', '.join(TABLES)}")
    return json.loads(json.dumps(_shipped(f"{name}-table-schema.json")))


def table_fields(name: str) -> list[str]:
    """The columns of a Camtrap DP table, in the schema's order."""
    return [f["name"] for f in _shipped(f"{name}-table-schema.json")["fields"]]


def profile_schema() -> dict[str, Any]:
    return _shipped("camtrap-dp-profile.json")


def _local_schema_for(url: str) -> str | None:
    """The table name whose official schema URL is ``url`` (None: not one of the shipped version's)."""
    return next((name for name, known in SCHEMA_URLS.items() if known == url), None)


# --------------------------------------------------------------------------- writing


def cell(value: Any) -> str:
    """A value as its CSV cell: empty for None / NaN, ``true``/``false``, JSON for objects (``exifData``)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    if isinstance(value, datetime):
        return timestamp(value)
    return str(value)


def _whole(value: Any) -> Any:
    """A whole number stored as a float (``2.0``, from a JSON or CSV round trip) as the integer it is."""
    return int(value) if isinstance(value, float) and math.isfinite(value) and value.is_integer() else value


def timestamp(when: datetime) -> str:
    """A date-time as Camtrap DP writes it: ``%Y-%m-%dT%H:%M:%S`` and the UTC offset (``Z`` for UTC), whole
    seconds (the table schemas' format has no fractions)."""
    if when.tzinfo is None:
        raise CamtrapDPError(f"the time {when.isoformat()} has no time zone; Camtrap DP needs one")
    text = when.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def write_table(path: Path, name: str, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write one Camtrap DP table with exactly its schema's columns, in order; returns the number of rows.

    A row holding a column the schema does not have is refused (naming it): such a cell would be lost."""
    columns = table_fields(name)
    known = set(columns)
    whole = {f["name"] for f in _shipped(f"{name}-table-schema.json")["fields"] if f["type"] == "integer"}
    n = 0
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(columns)
        for row in rows:
            extra = sorted(set(row) - known)
            if extra:
                raise CamtrapDPError(f"{name} row {n + 1}: Camtrap DP's {name} table has no column "
                                     f"{', '.join(extra)}")
            writer.writerow([cell(_whole(row.get(c)) if c in whole else row.get(c)) for c in columns])
            n += 1
    return n


def _spatial(deployments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """GeoJSON of the deployments: a Point for one place, else the bounding box as a Polygon."""
    points = [(float(d["longitude"]), float(d["latitude"])) for d in deployments
              if d.get("latitude") is not None and d.get("longitude") is not None]
    if not points:
        raise CamtrapDPError("none of the deployments has coordinates; Camtrap DP needs latitude and longitude")
    lons, lats = [p[0] for p in points], [p[1] for p in points]
    if min(lons) == max(lons) and min(lats) == max(lats):
        return {"type": "Point", "coordinates": [lons[0], lats[0]]}
    w, e, s, n = min(lons), max(lons), min(lats), max(lats)
    if w == e or s == n:  # stations along one meridian or parallel: the line between the outermost
        return {"type": "LineString", "coordinates": [[w, s], [e, n]]}
    return {"type": "Polygon", "coordinates": [[[w, s], [e, s], [e, n], [w, n], [w, s]]]}


def _day(text: Any) -> date:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).date()


def _temporal(deployments: Sequence[Mapping[str, Any]], media: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """First and last day of the package (local dates, as the timestamps are written): the deployments' first
    start and last end, as the Camtrap DP profile defines them (the media's first and last day fall inside and
    would shorten the survey); the media's days only when no deployment gives its period."""
    starts = [_day(d["deploymentStart"]) for d in deployments if d.get("deploymentStart")]
    ends = [_day(d["deploymentEnd"]) for d in deployments if d.get("deploymentEnd")]
    if starts and ends:
        return {"start": min(starts).isoformat(), "end": max(ends).isoformat()}
    days = [_day(m["timestamp"]) for m in media if m.get("timestamp")] + starts + ends
    if not days:
        raise CamtrapDPError("there is no date in the package (no media, no deployment period)")
    return {"start": min(days).isoformat(), "end": max(days).isoformat()}


def _taxon(name: str, common_name: str | None) -> dict[str, Any]:
    """One ``taxonomic`` entry: the scientific name, and the common name as its English vernacular name."""
    return {"scientificName": name, "vernacularNames": {"eng": common_name}} if common_name else \
        {"scientificName": name}


def build_descriptor(meta: PackageMetadata, *, deployments: Sequence[Mapping[str, Any]],
                     media: Sequence[Mapping[str, Any]], observations: Sequence[Mapping[str, Any]],
                     common_names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``datapackage.json`` of a package holding these rows (official profile and schema URLs).
    ``common_names`` (English, by scientific name) become the taxa's ``vernacularNames``."""
    resources = [{"name": name, "path": f"{name}.csv", "profile": "tabular-data-resource", "format": "csv",
                  "mediatype": "text/csv", "encoding": "utf-8", "schema": SCHEMA_URLS[name]} for name in TABLES]
    # the capture methods the media state; a photo stating none is taken to be motion-triggered (camera traps' way)
    capture = {m.get("captureMethod") if m.get("captureMethod") in CAPTURE_METHODS else DEFAULT_CAPTURE_METHOD
               for m in media} or {DEFAULT_CAPTURE_METHOD}
    names = sorted({o["scientificName"] for o in observations if o.get("scientificName")})
    descriptor: dict[str, Any] = {
        "resources": resources,
        "profile": PROFILE_URL,
        "created": timestamp(meta.created),
        "title": meta.title,
        "contributors": [dict(c) for c in meta.contributors],
        "project": {"title": meta.project_title, "samplingDesign": meta.sampling_design,
                    "captureMethod": sorted(capture),
                    "individualAnimals": any(o.get("individualID") for o in observations),
                    "observationLevel": list(meta.observation_level)},
        "spatial": _spatial(deployments),
        "temporal": _temporal(deployments, media),
        "taxonomic": [_taxon(n, (common_names or {}).get(n)) for n in names],
    }
    if meta.package_id:
        descriptor["id"] = meta.package_id
    if meta.description:
        descriptor["description"] = meta.description
    return descriptor


def write_package(folder: str | Path, meta: PackageMetadata, *, deployments: Sequence[Mapping[str, Any]],
                  media: Sequence[Mapping[str, Any]], observations: Sequence[Mapping[str, Any]],
                  common_names: Mapping[str, str] | None = None) -> WrittenPackage:
    """Write ``deployments.csv``, ``media.csv``, ``observations.csv`` and ``datapackage.json`` into ``folder``
    (made if missing). The media files themselves are the caller's to place at each row's ``filePath``.
    ``common_names`` are as for :func:`build_descriptor`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = build_descriptor(meta, deployments=deployments, media=media, observations=observations,
                                  common_names=common_names)
    rows = {"deployments": write_table(folder / "deployments.csv", "deployments", deployments),
            "media": write_table(folder / "media.csv", "media", media),
            "observations": write_table(folder / "observations.csv", "observations", observations)}
    (folder / "datapackage.json").write_text(json.dumps(descriptor, indent=2, ensure_ascii=False) + "\n",
                                             encoding="utf-8")
    return WrittenPackage(folder=folder, descriptor=descriptor, rows=rows)


# --------------------------------------------------------------------------- validating


def _retrieve(uri: str) -> Resource:
    """The outside schemas the profile refers to, read from disk; anything else is refused (never fetched)."""
    if uri == GEOJSON_URL:
        return Resource.from_contents(json.loads(GEOJSON_FILE.read_text(encoding="utf-8")),
                                      default_specification=DRAFT4)
    if uri == DATA_PACKAGE_URL:
        # the generic Data Package rules: checked by frictionless when it loads the package (validate_package)
        return Resource.from_contents({}, default_specification=DRAFT4)
    raise NoSuchResource(ref=uri)


def _json_path(parts: Iterable[Any]) -> str:
    text = ""
    for p in parts:
        text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
    return text


def check_descriptor(descriptor: Mapping[str, Any]) -> list[PackageProblem]:
    """The descriptor against the shipped Camtrap DP profile (and each resource's schema URL against the shipped
    table schemas): one problem per JSON Schema error, naming where it is."""
    validator_cls = jsonschema.validators.validator_for(profile_schema(), default=jsonschema.Draft4Validator)
    validator = validator_cls(profile_schema(), registry=Registry(retrieve=_retrieve),
                              format_checker=validator_cls.FORMAT_CHECKER)
    problems = []
    for error in sorted(validator.iter_errors(dict(descriptor)), key=lambda e: list(e.absolute_path)):
        where = _json_path(error.absolute_path)
        problems.append(PackageProblem(None, error.message if where else f"the descriptor: {error.message}",
                                       field=where or None))
    for res in descriptor.get("resources") or []:
        if not isinstance(res, Mapping) or res.get("name") not in TABLES:
            continue
        schema = res.get("schema")
        if _local_schema_for(schema) != res["name"]:
            problems.append(PackageProblem(res["name"], f"its schema is {schema!r}, not the Camtrap DP "
                                                        f"{CAMTRAP_DP_VERSION} {res['name']} schema "
                                                        f"{SCHEMA_URLS[res['name']]}", field="schema"))
    names = {r.get("name") for r in descriptor.get("resources") or [] if isinstance(r, Mapping)}
    for missing in [t for t in TABLES if t not in names]:
        problems.append(PackageProblem(missing, "the package has no such resource", field="resources"))
    return problems


def _offline_descriptor(descriptor: Mapping[str, Any]) -> dict[str, Any]:
    """The descriptor frictionless checks: the Camtrap DP tables with the shipped schemas in place of their URLs,
    no remote profile (checked by :func:`check_descriptor`), nothing it would have to fetch."""
    local = {k: v for k, v in descriptor.items() if k != "profile"}
    local["resources"] = []
    for res in descriptor.get("resources") or []:
        # a table naming another schema URL is reported by check_descriptor, and its rows still checked here
        if isinstance(res, Mapping) and res.get("name") in TABLES:
            local["resources"].append({**res, "schema": table_schema(res["name"])})
    return local


def _is_remote(path: Any) -> bool:
    return isinstance(path, str) and "://" in path


def validate_package(folder: str | Path) -> list[PackageProblem]:
    """Every reason the package in ``folder`` is not valid Camtrap DP (the shipped :data:`CAMTRAP_DP_VERSION`),
    checked offline; an empty list: it is valid."""
    folder = Path(folder)
    path = folder / "datapackage.json"
    try:
        descriptor = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [PackageProblem(None, f"there is no datapackage.json in {folder}")]
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [PackageProblem(None, f"datapackage.json is not JSON ({exc})")]
    if not isinstance(descriptor, dict):
        return [PackageProblem(None, "datapackage.json does not hold a JSON object")]
    problems = check_descriptor(descriptor)
    local = _offline_descriptor(descriptor)
    for res in local["resources"]:
        if _is_remote(res.get("path")):
            problems.append(PackageProblem(res["name"], f"its path {res['path']!r} is a URL; this check reads "
                                                        "files in the package only", field="path"))
        elif not (folder / str(res.get("path"))).is_file():
            problems.append(PackageProblem(res["name"], f"its file {res.get('path')!r} is not in the package",
                                           field="path"))
    if any(p.field == "path" for p in problems):
        return problems
    try:
        report = frictionless.Package(local, basepath=str(folder)).validate()
    except frictionless.FrictionlessException as exc:
        return problems + [PackageProblem(None, f"frictionless could not read the package: {exc.error.message}")]
    for error in report.errors:  # the package descriptor itself (generic Data Package rules)
        problems.append(PackageProblem(None, error.message))
    for task in report.tasks:
        for error in task.errors:
            problems.append(PackageProblem(task.name, error.message, row=getattr(error, "row_number", None),
                                           field=getattr(error, "field_name", None)))
    return problems

