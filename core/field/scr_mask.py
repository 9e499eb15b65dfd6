"""Habitat masks: the points where an animal's centre of activity may lie, each standing for one square cell.

- :func:`trapbuffer_mask` builds the mask as secr's ``make.mask(traps, buffer, nx = 64, type = "trapbuffer")``:
  a grid over the detectors' x- and y-range widened by the buffer on each side, spacing the x-extent over ``nx``
  (or ``spacing_m``), first point half a cell in from the corner, and only the points within the buffer of some
  detector kept; ``polygon`` (rings of (x, y)) drops the points outside it as well (secr's ``poly``);
- :func:`read_mask_csv` reads a mask given as x,y points (the cell spacing is their grid's, unless given);
- :func:`read_geojson_polygon` reads the rings of a GeoJSON (Multi)Polygon, in the detectors' metres.

Cell area in hectares is ``spacing**2 / 10000``, as secr's ``attr(mask, "area")``; densities are per hectare.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.field.scr_errors import MaskError

#: Rings of one habitat: a list of polygons, each a list of rings (outer first, then holes) of (x, y) pairs.
Polygons = list[list[np.ndarray]]


@dataclass(frozen=True, eq=False)
class Mask:
    """Mask points (metres), their cell spacing, and how the mask was made."""

    xy: np.ndarray  # (M, 2)
    spacing_m: float
    buffer_m: float | None
    source: str  # "trapbuffer", "csv" or "polygon"

    @property
    def n_points(self) -> int:
        return int(self.xy.shape[0])

    @property
    def cell_area_ha(self) -> float:
        return self.spacing_m ** 2 / 10_000.0

    @property
    def area_ha(self) -> float:
        return self.n_points * self.cell_area_ha

    @property
    def area_km2(self) -> float:
        return self.area_ha / 100.0


def _r_seq(start: float, stop: float, step: float) -> np.ndarray:
    """R's ``seq(start, stop, by = step)``: the values up to ``stop`` with R's 1e-10 allowance."""
    count = int((stop - start) / step + 1e-10) + 1
    return start + np.arange(max(count, 0)) * step


def nearest_detector_distance(points: np.ndarray, detectors: np.ndarray) -> np.ndarray:
    """Distance (m) from each point to its nearest detector, in blocks to bound memory."""
    out = np.empty(points.shape[0])
    step = max(1, 2_000_000 // max(1, detectors.shape[0]))
    for lo in range(0, points.shape[0], step):
        block = points[lo:lo + step]
        d2 = ((block[:, None, :] - detectors[None, :, :]) ** 2).sum(axis=2)
        out[lo:lo + step] = np.sqrt(d2.min(axis=1))
    return out


def points_in_polygons(points: np.ndarray, polygons: Polygons) -> np.ndarray:
    """Which points lie inside the habitat: inside an outer ring and outside its holes (even-odd ray casting)."""
    inside = np.zeros(points.shape[0], dtype=bool)
    x, y = points[:, 0], points[:, 1]
    for rings in polygons:
        crossings = np.zeros(points.shape[0], dtype=bool)
        for ring in rings:
            xs, ys = ring[:, 0], ring[:, 1]
            x0, y0 = xs, ys
            x1, y1 = np.roll(xs, -1), np.roll(ys, -1)
            for a, b, c, d in zip(x0, y0, x1, y1):
                if b == d:
                    continue
                straddles = (b > y) != (d > y)
                x_cross = a + (y - b) * (c - a) / (d - b)
                crossings ^= straddles & (x < x_cross)
        inside |= crossings
    return inside


def trapbuffer_mask(detectors: np.ndarray, *, buffer_m: float, spacing_m: float | None = None, nx: int = 64,
                    polygon: Polygons | None = None) -> Mask:
    """secr's ``make.mask(type = "trapbuffer")`` around the detectors (see the module's docstring)."""
    if not (isinstance(buffer_m, (int, float)) and math.isfinite(buffer_m)) or buffer_m <= 0:
        raise MaskError(f"the buffer must be more than 0 m (got {buffer_m}); give about 4 times the expected "
                        "sigma, the distance over which an animal is detected")
    if spacing_m is not None and not (math.isfinite(spacing_m) and spacing_m > 0):
        raise MaskError(f"the mask spacing must be more than 0 m (got {spacing_m})")
    xl = (detectors[:, 0].min() - buffer_m, detectors[:, 0].max() + buffer_m)
    yl = (detectors[:, 1].min() - buffer_m, detectors[:, 1].max() + buffer_m)
    spacing = float(spacing_m) if spacing_m is not None else (xl[1] - xl[0]) / nx
    x = _r_seq(xl[0] + spacing / 2, xl[1], spacing)
    y = _r_seq(yl[0] + spacing / 2, yl[1], spacing)
    gx, gy = np.meshgrid(x, y)  # x varies fastest, as R's expand.grid
    grid = np.column_stack([gx.ravel(), gy.ravel()])
    keep = nearest_detector_distance(grid, detectors) <= buffer_m
    source = "trapbuffer"
    if polygon is not None:
        keep &= points_in_polygons(grid, polygon)
        source = "polygon"
    points = grid[keep]
    if points.shape[0] == 0:
        raise MaskError("the habitat polygon holds no mask point within the buffer of a detector; check that the "
                        "polygon is in the detectors' coordinates (metres) and covers them")
    return Mask(xy=points, spacing_m=spacing, buffer_m=float(buffer_m), source=source)


def read_mask_csv(path: str | Path, *, spacing_m: float | None = None) -> Mask:
    """A mask from a CSV of x,y points (a header naming ``x`` and ``y``, or the first two columns). The spacing
    is the smallest gap between distinct x (or y) values unless ``spacing_m`` says otherwise."""
    with open(path, newline="", encoding="utf-8-sig") as fh:
        rows = [r for r in csv.reader(fh) if r and any(c.strip() for c in r)]
    if not rows:
        raise MaskError(f"{path}: the mask file is empty; give one x,y point per line")
    header = [c.strip().lower() for c in rows[0]]
    if "x" in header and "y" in header:
        ix, iy, body = header.index("x"), header.index("y"), rows[1:]
    else:
        ix, iy, body = 0, 1, rows
    try:
        xy = np.array([[float(r[ix]), float(r[iy])] for r in body], dtype=float)
    except (ValueError, IndexError):
        raise MaskError(f"{path}: every mask line needs numeric x and y (metres)") from None
    if xy.shape[0] == 0 or not np.all(np.isfinite(xy)):
        raise MaskError(f"{path}: the mask needs finite x,y points")
    if spacing_m is None:
        gaps = [np.diff(np.unique(xy[:, j])) for j in (0, 1)]
        gaps = np.concatenate([g[g > 1e-6] for g in gaps])
        if gaps.size == 0:
            raise MaskError(f"{path}: cannot tell the cell spacing from a single point; give the spacing")
        spacing_m = float(gaps.min())
    if not (math.isfinite(spacing_m) and spacing_m > 0):
        raise MaskError(f"the mask spacing must be more than 0 m (got {spacing_m})")
    return Mask(xy=xy, spacing_m=float(spacing_m), buffer_m=None, source="csv")


def read_geojson_polygon(source: str | Path | dict) -> Polygons:
    """The rings of a GeoJSON Polygon or MultiPolygon (a geometry, a Feature or a FeatureCollection), with the
    coordinates as they are: they must be in the detectors' metres."""
    data = source if isinstance(source, dict) else json.loads(Path(source).read_text(encoding="utf-8"))
    geometries: list[dict] = []

    def collect(obj: dict) -> None:
        kind = obj.get("type")
        if kind == "FeatureCollection":
            for f in obj.get("features", []):
                collect(f)
        elif kind == "Feature":
            if obj.get("geometry"):
                collect(obj["geometry"])
        elif kind == "GeometryCollection":
            for g in obj.get("geometries", []):
                collect(g)
        elif kind in ("Polygon", "MultiPolygon"):
            geometries.append(obj)

    collect(data)
    polygons: Polygons = []
    for g in geometries:
        parts = [g["coordinates"]] if g["type"] == "Polygon" else g["coordinates"]
        for part in parts:
            rings = [np.asarray(r, dtype=float)[:, :2] for r in part if len(r) >= 3]
            if rings:
                polygons.append(rings)
    if not polygons:
        raise MaskError("the GeoJSON holds no Polygon or MultiPolygon; give the habitat as a polygon")
    return polygons


def check_mask_near_detectors(mask: Mask, detectors: np.ndarray, *, near_m: float) -> None:
    """Refuse a mask none of whose points lies within ``near_m`` of a detector: the animals it could hold would
    never be detected."""
    if mask.n_points == 0:
        raise MaskError("the mask has no points")
    nearest = nearest_detector_distance(mask.xy, detectors)
    if not np.any(nearest <= near_m):
        raise MaskError(f"no mask point lies within {near_m:g} m of a detector (the nearest is {nearest.min():.0f} m "
                        "away); check that the mask is in the detectors' coordinates (metres) and covers them")


def summarise_spacing(detectors: Sequence[Sequence[float]]) -> float:
    """Mean distance (m) from each detector to its nearest neighbour."""
    xy = np.asarray(detectors, dtype=float)
    d2 = ((xy[:, None, :] - xy[None, :, :]) ** 2).sum(axis=2)
    np.fill_diagonal(d2, np.inf)
    return float(np.sqrt(d2.min(axis=1)).mean())
