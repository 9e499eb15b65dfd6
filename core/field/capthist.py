"""Capture histories for the field's own tools (docs/DESIGN.md section 8): secr's text inputs, camtrapR's record
table and MARK's encounter histories.

Pure writers over plain values; :mod:`jobs.actions.population` gathers what they write. Each format's columns and
conventions, and why names pass through :func:`secr_token`: docs/population.md."""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pyproj import Transformer

from core.io.csv_safety import defuse_cell
from core.field.home_range import utm_epsg  # one definition of the zones, shared with the home ranges

#: camtrapR's recordTableIndividual columns, in its order (camtrapR reference, recordTableIndividualSample).
CAMTRAPR_COLUMNS = ("Station", "Species", "Individual", "DateTimeOriginal", "Date", "Time", "delta.time.secs",
                    "delta.time.mins", "delta.time.hours", "delta.time.days", "Directory", "FileName")

_UNSAFE = re.compile(r"[\s#/]+")


def secr_token(name: str) -> str:
    """``name`` as one white-space-free field secr's ``read.table`` reads back whole (``_`` for white space, ``#``
    and ``/``); an empty name is refused."""
    text = _UNSAFE.sub("_", str(name).strip())
    if not text:
        raise ValueError(f"an empty name cannot be written to secr's files (got {name!r})")
    return text


# --------------------------------------------------------------------------- coordinates


def utm_coordinates(points: Sequence[tuple[float, float]], *,
                    epsg: int | None = None) -> tuple[int, list[tuple[float, float]]]:
    """(epsg, [(x, y) in metres]) of (lat, lon) points in one UTM zone: ``epsg``, else the zone of the points'
    centroid (mean latitude and longitude), so that every point of a study shares one grid."""
    if not points:
        raise ValueError("no point with coordinates to project")
    if epsg is None:
        epsg = utm_epsg(sum(p[0] for p in points) / len(points), sum(p[1] for p in points) / len(points))
    to_utm = Transformer.from_crs("EPSG:4326", f"EPSG:{epsg}", always_xy=True)
    xs, ys = to_utm.transform([p[1] for p in points], [p[0] for p in points])
    return epsg, [(float(x), float(y)) for x, y in zip(xs, ys)]


# --------------------------------------------------------------------------- usage


def _union(intervals: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    merged: list[tuple[datetime, datetime]] = []
    for lo, hi in sorted(intervals):
        if hi < lo:
            raise ValueError(f"an active period ends before it begins: {lo.isoformat()} .. {hi.isoformat()}")
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def usage_matrix(active: Mapping[str, Sequence[tuple[datetime, datetime]]],
                 occasion_bounds: Sequence[tuple[datetime, datetime]]) -> dict[str, list[float]]:
    """Detector -> its usage on each occasion: the days (24 h of local wall-clock time, fractions kept) of the
    occasion [begin, end) on which the detector was active. ``active`` holds each detector's active periods
    (several deployments of one location: their union, so two cameras at once still count once); times are naive
    local datetimes, as the occasions'."""
    day = timedelta(days=1)
    out: dict[str, list[float]] = {}
    for name, periods in active.items():
        merged = _union(periods)
        row = []
        for begin, end in occasion_bounds:
            overlap = sum(((min(hi, end) - max(lo, begin)) for lo, hi in merged if hi > begin and lo < end),
                          timedelta(0))
            row.append(overlap / day)
        out[name] = row
    return out


def usage_field(values: Sequence[float], *, binary: bool = False) -> str:
    """The usage written after X Y: numbers separated by spaces (up to 4 decimals), or with ``binary`` the DENSITY
    string of 0/1 codes (1 for any use in the occasion)."""
    if binary:
        return "".join("1" if v > 0 else "0" for v in values)
    return " ".join(f"{round(v, 4):g}" for v in values)


# --------------------------------------------------------------------------- secr


@dataclass(frozen=True)
class Trap:
    """One secr detector: its name (a station), UTM coordinates in metres and per-occasion usage."""

    name: str
    x: float
    y: float
    usage: tuple[float, ...]


def secr_captures_text(captures: Iterable[tuple[str, str, int, str]], *, header: Sequence[str] = ()) -> str:
    """secr's captures file: one ``Session ID Occasion Detector`` line per distinct (session, individual,
    occasion, detector), sorted; ``header`` lines are written first as ``#`` comments."""
    rows = set()
    for session, ident, occasion, detector in captures:
        if int(occasion) < 1:
            raise ValueError(f"secr occasions count from 1, got {occasion} for {ident!r}")
        rows.add((secr_token(session), secr_token(ident), int(occasion), secr_token(detector)))
    lines = [f"# {h}" for h in header] + ["# Session ID Occasion Detector"]
    lines += [f"{s} {i} {o} {d}" for s, i, o, d in sorted(rows, key=lambda r: (r[0], r[1], r[2], r[3]))]
    return "\n".join(lines) + "\n"


def secr_traps_text(traps: Sequence[Trap], *, binary: bool = False, header: Sequence[str] = ()) -> str:
    """secr's traps file: ``Detector X Y usage`` per detector (X, Y to 0.01 m), ``header`` lines as ``#``
    comments first."""
    names = [secr_token(t.name) for t in traps]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"two detectors would share the name {dupes[0]!r} in secr's traps file")
    n_occ = {len(t.usage) for t in traps}
    if len(n_occ) > 1:
        raise ValueError(f"detectors give usage for different numbers of occasions: {sorted(n_occ)}")
    lines = [f"# {h}" for h in header] + ["# Detector X Y usage(one value per occasion)"]
    for name, t in zip(names, traps):
        lines.append(f"{name} {t.x:.2f} {t.y:.2f} {usage_field(t.usage, binary=binary)}".rstrip())
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- MARK


def mark_inp_text(histories: Mapping[str, Sequence[int]], *, header: Sequence[str] = ()) -> str:
    """MARK's encounter histories: ``/* name */ 0101001 1;`` per individual, in the given order."""
    lengths = {len(h) for h in histories.values()}
    if len(lengths) > 1:
        raise ValueError(f"histories of different lengths: {sorted(lengths)}")
    lines = [f"/* {h.replace('*/', '* /')} */" for h in header]
    for name, history in histories.items():
        codes = "".join("1" if int(x) > 0 else "0" for x in history)
        lines.append(f"/* {str(name).replace('*/', '* /')} */ {codes} 1;")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- camtrapR


@dataclass(frozen=True)
class Record:
    """One detection for camtrapR: station, species, individual, the naive local time, and the photo's file."""

    station: str
    species: str
    individual: str
    when: datetime
    directory: str
    file_name: str


def camtrapr_rows(records: Iterable[Record]) -> list[dict[str, object]]:
    """recordTableIndividual's rows, sorted by station, individual and time; delta.time is the time since the
    previous record of the same individual and species at the same station (0 for the first)."""
    ordered = sorted(records, key=lambda r: (r.station, r.species, r.individual, r.when, r.file_name))
    rows: list[dict[str, object]] = []
    previous: dict[tuple[str, str, str], datetime] = {}
    for r in ordered:
        if r.when.tzinfo is not None:
            raise ValueError(f"record of {r.individual!r} at {r.station!r}: give the naive local time")
        key = (r.station, r.species, r.individual)
        secs = (r.when - previous[key]).total_seconds() if key in previous else 0.0
        previous[key] = r.when
        rows.append({
            "Station": r.station, "Species": r.species, "Individual": r.individual,
            "DateTimeOriginal": r.when.strftime("%Y-%m-%d %H:%M:%S"), "Date": r.when.strftime("%Y-%m-%d"),
            "Time": r.when.strftime("%H:%M:%S"), "delta.time.secs": int(secs) if secs.is_integer() else secs,
            "delta.time.mins": round(secs / 60, 1), "delta.time.hours": round(secs / 3600, 1),
            "delta.time.days": round(secs / 86400, 1), "Directory": r.directory, "FileName": r.file_name,
        })
    return rows


def camtrapr_csv_text(records: Iterable[Record]) -> str:
    """The record table as CSV text (header = :data:`CAMTRAPR_COLUMNS`; formula-like names defused)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CAMTRAPR_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in camtrapr_rows(records):  # names a spreadsheet would run as a formula get a leading quote
        writer.writerow({k: defuse_cell(v) if isinstance(v, str) else v for k, v in row.items()})
    return buf.getvalue()
