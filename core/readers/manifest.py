"""CSV manifests: ``filename[,identity,flank,sighting,date,lat,lon,camera,observer,place,species,deployment,
timestamp]`` (extra columns ignored; only ``filename`` is required: a photo without an identity, or with an empty
one, comes in unassigned; ``file``/``image`` and ``individual``/``ground_truth`` accepted as column
aliases, see :data:`MANIFEST_COLUMNS`). ``deployment`` names the photo's camera deployment (its deploymentID) or
its station (locationID or name: the deployment active at the photo's time is chosen); ``timestamp`` is when the
photo was taken (ISO 8601; without a UTC offset the deployment's is taken), else a ``date`` holding a time of
day. A row with a deployment and no ``sighting`` label joins an event formed from its time (photos of one
deployment within 60 s) unless it states an observer or coordinates of its own (then those facts make its
sighting, as before). Files are looked up next to the CSV, then in its ``images/`` folder, then by unique
file name anywhere below it. The CSV may be UTF-8 (with or without BOM) or Latin-1, comma, semicolon or tab
separated."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from core.readers.base import Entry, ManifestError, ReadError, Tree, tree_reader, unsafe_reason

#: Manifest columns: canonical name -> accepted header spellings (case/space-insensitive).
MANIFEST_COLUMNS = {
    "filename": ("filename", "file_name", "file", "image", "path"),
    "identity": ("identity", "individual", "ground_truth", "individual_id"),
    "flank": ("flank", "side"),
    "sighting": ("sighting", "sighting_id", "encounter"),
    "date": ("date", "datetime", "date_time", "time"),
    "lat": ("lat", "latitude"),
    "lon": ("lon", "lng", "long", "longitude"),
    "camera": ("camera", "camera_id", "station"),
    "observer": ("observer", "photographer"),
    "place": ("place", "location", "site", "locality"),
    "species": ("species", "taxon", "species_name"),
    "deployment": ("deployment", "deployment_id", "deploymentid"),
    "timestamp": ("timestamp", "taken_at", "datetime_original"),
}
#: A camera-trap manifest names no animal: the identity column is optional.
MANIFEST_REQUIRED = ("filename",)
#: A flank as written in a manifest -> the flank word (None: not stated).
FLANK_WORDS = {
    "left": "left", "l": "left", "right": "right", "r": "right",
    "front": "front", "f": "front", "other": "other", "o": "other",
    "": None, "unknown": None, "?": None, "na": None, "n/a": None,
}
MANIFEST_NAME = "manifest.csv"


@dataclass
class ManifestRow:
    line: int
    values: dict[str, str]
    missing: tuple[str, ...] = ()  # header columns a short (ragged) row has no cell for


def csv_rows(data: bytes) -> Any:
    """A ``csv.reader`` over a CSV's bytes: UTF-8 with or without BOM, else Latin-1; comma, semicolon or tab,
    sniffed from the first 4 KiB (spreadsheets export all three)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
    except csv.Error:
        dialect = csv.excel
    return csv.reader(io.StringIO(text), dialect)


def read_csv(data: bytes, *, label: str) -> tuple[list[str], list[ManifestRow]]:
    """Header (lower-cased, stripped) and non-blank rows of a CSV (UTF-8 with or without BOM, else Latin-1)."""
    reader = csv_rows(data)
    header: list[str] | None = None
    rows: list[ManifestRow] = []
    try:
        for raw in reader:
            if not any(c.strip() for c in raw):
                continue
            if header is None:
                header = [h.strip().lower().replace(" ", "_") for h in raw]
                continue
            values = {header[i]: raw[i].strip() for i in range(min(len(header), len(raw)))}
            rows.append(ManifestRow(line=reader.line_num, values=values, missing=tuple(header[len(raw):])))
    except csv.Error as exc:
        raise ManifestError(f"{label}: not a readable CSV file ({exc})") from None
    if header is None:
        raise ManifestError(f"{label}: the CSV file is empty (no header line)")
    return header, rows


def csv_header(path: Path) -> list[str]:
    """The header of the CSV file at ``path`` (read from its first line only), [] when unreadable."""
    try:
        with open(path, "rb") as fh:
            header, _ = read_csv(fh.read(64 * 1024).split(b"\n", 1)[0] + b"\n", label=path.name)
        return header
    except (OSError, ManifestError):
        return []


def map_columns(header: list[str], *, required: Sequence[str], label: str,
                columns: dict[str, Sequence[str]] = MANIFEST_COLUMNS) -> dict[str, str]:
    """Canonical column -> header name present; ManifestError naming every missing required column."""
    found: dict[str, str] = {}
    for canon, aliases in columns.items():
        for alias in aliases:
            if alias in header:
                found[canon] = alias
                break
    missing = [c for c in required if c not in found]
    if missing:
        raise ManifestError(
            f"{label}: missing required column{'s' if len(missing) > 1 else ''} {', '.join(repr(m) for m in missing)} "
            f"(found: {', '.join(repr(h) for h in header if h) or 'none'}); nothing was imported"
        )
    return found


def parse_flank(value: str | None) -> str | None:
    """'left'/'L', 'right'/'R', 'front'/'F', 'other'/'O' (any case) -> the flank word; blank/'unknown' -> None.

    Raises ValueError for anything else.
    """
    key = (value or "").strip().lower()
    if key not in FLANK_WORDS:
        raise ValueError(f"unknown flank {value!r} (use left, right, front or other, or L / R)")
    return FLANK_WORDS[key]


def parse_coord(value: str, *, what: str, limit: float) -> float | None:
    if not value:
        return None
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{what} {value!r} is not a number") from None
    if not -limit <= x <= limit:
        raise ValueError(f"{what} {value!r} is outside -{limit:g}..{limit:g}")
    return x


def row_facts(row: ManifestRow, cols: dict[str, str]
              ) -> tuple[str | None, str | None, dict[str, Any] | None, str | None]:
    """Identity, flank, sighting facts and species of one manifest row (ValueError with a curator message)."""
    get = lambda c: row.values.get(cols[c], "").strip() if c in cols else ""  # noqa: E731
    identity = get("identity") or None
    if identity and len(identity) > 200:
        raise ValueError("the identity name is longer than 200 characters")
    flank = parse_flank(get("flank"))
    lat = parse_coord(get("lat"), what="latitude", limit=90.0)
    lon = parse_coord(get("lon"), what="longitude", limit=180.0)
    place = get("place") or None
    if place and len(place) > 200:
        raise ValueError("the place is longer than 200 characters")
    species = get("species") or None
    if species and (len(species) > 120 or any(ord(c) < 32 for c in species)):
        raise ValueError("the species is longer than 120 characters or holds control characters")
    facts = {"date": get("date") or None, "place": place, "lat": lat, "lon": lon, "camera": get("camera") or None,
             "observer": get("observer") or None}
    key = get("sighting")
    if not key and any(v is not None for v in facts.values()):
        # no sighting label: photos sharing date, place, camera and observer are one sighting
        key = " / ".join(str(v) for v in facts.values() if v is not None)
    sighting = {"key": key[:200], **facts} if key else None
    return identity, flank, sighting, species


def row_station(row: ManifestRow, cols: dict[str, str], sighting: dict[str, Any] | None = None
                ) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """The deployment (or station), the time a photo was taken and its sighting, as one manifest row gives them.

    The time is the ``timestamp`` column, else the ``date`` column when it holds a time of day (a date alone
    says nothing about which photos are seconds apart). ``sighting`` (from :func:`row_facts`) is dropped when the
    row names a deployment but no sighting label, an observer or coordinates: its time and deployment say what that
    sighting would, and the photo joins an event formed from its time instead."""
    get = lambda c: row.values.get(cols[c], "").strip() if c in cols else ""  # noqa: E731
    deployment = get("deployment") or None
    if deployment and len(deployment) > 200:
        raise ValueError("the deployment is longer than 200 characters")
    taken = get("timestamp") or None
    if taken is None:
        date = get("date")
        taken = date if len(date) > 10 and ":" in date[10:] else None
    labelled = "sighting" in cols and bool(get("sighting"))
    if deployment and sighting and not labelled and sighting.get("observer") is None \
            and sighting.get("lat") is None and sighting.get("lon") is None:
        sighting = None
    return deployment, taken, sighting


def manifest_entries(tree: Tree, csv_rel: str, *, prefixes: Sequence[str] = ("", "images/"),
                     display_prefix: str = "") -> list[Entry]:
    """Entries of a manifest CSV inside ``tree`` (raises ManifestError when unusable). Photos the manifest does
    not list are not imported."""
    label = display_prefix + csv_rel
    try:
        header, rows = read_csv(tree.read(csv_rel), label=label)
    except ReadError as exc:
        raise ManifestError(f"{label}: {exc}") from None
    cols = map_columns(header, required=MANIFEST_REQUIRED, label=label)
    base_dir = str(PurePosixPath(csv_rel).parent)
    base = "" if base_dir in ("", ".") else base_dir + "/"
    entries: list[Entry] = []
    for row in rows:
        fname = row.values.get(cols["filename"], "").strip()
        name = display_prefix + (fname or f"{csv_rel} line {row.line}")
        if not fname:
            entries.append(Entry(name, error=f"line {row.line}: the filename is empty"))
            continue
        reason = unsafe_reason(fname)
        if reason:
            entries.append(Entry(name, error=f"line {row.line}: refused: {reason} of the manifest's folder"))
            continue
        try:
            identity, flank, sighting, species = row_facts(row, cols)
            deployment, taken_at, sighting = row_station(row, cols, sighting)
        except ValueError as exc:
            entries.append(Entry(name, error=f"line {row.line}: {exc}"))
            continue
        rel = tree.find(fname, prefixes=[base + p for p in prefixes])
        if rel is None:
            where = " or ".join(f"'{base + p}'" if base + p else "the manifest's folder" for p in prefixes)
            entries.append(Entry(name, error=f"line {row.line}: listed in the manifest but not found (looked in {where})"))
            continue
        warning = (f"line {row.line} has only {len(row.values)} of the header's {len(row.values) + len(row.missing)} "
                   f"cells: no {', '.join(row.missing)} for this photo") if row.missing else None
        entries.append(Entry(name, read=tree_reader(tree, rel), identity=identity, flank=flank, sighting=sighting,
                             species=species, deployment=deployment, taken_at=taken_at, warning=warning))
    return entries
