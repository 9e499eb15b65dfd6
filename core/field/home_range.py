"""Home range as a minimum convex polygon (MCP) of the stations (places) where an individual was seen.

Pure functions over latitudes and longitudes (WGS84 degrees). The area is measured in metres on the UTM zone of
the points' centroid (pyproj), where a zone's scale error is at most about 0.1 % in length (0.2 % in area) at its
edges, and the polygon is the convex hull of the distinct points (scipy's Qhull). Fewer than three distinct stations,
or stations on one straight line, enclose no area: there is no home range yet (the area is 0, never shown as one)
and :attr:`HomeRange.reason` says why in words.

Limits, said plainly: the standard 6-degree zones are used (no Norway/Svalbard exceptions); points spread over
more than one zone are still projected on the centroid's zone (the error grows slowly, about 1 % in area 8 degrees
of longitude from its central meridian); points on both sides of the 180th meridian are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pyproj import Transformer
from scipy.spatial import ConvexHull, QhullError

#: Points closer than this (metres, after projection) count as one station.
SAME_STATION_M = 1.0
#: A hull thinner than this (square metres per metre of its longest side) is a line, not an area.
COLLINEAR_M = 1.0
NEEDS = "a home range (minimum convex polygon) needs 3 stations not on one line"


@dataclass(frozen=True)
class HomeRange:
    """The MCP of an individual's stations: its area and how it was measured."""

    area_km2: float
    n_stations: int  # distinct stations (points less than SAME_STATION_M apart are one)
    epsg: int | None  # the UTM zone's EPSG code the area was measured in (None: no station given)
    hull_lats: tuple[float, ...] = ()  # the polygon's corners in order (empty when there is no area)
    hull_lons: tuple[float, ...] = ()
    reason: str | None = None  # why there is no home range, in words (None when there is an area)

    @property
    def words(self) -> str:
        """The area as a curator reads it, with what produced it; where none can be measured, that there is none
        yet and why (an area of 0 km² would read as a measured home range)."""
        if self.reason:
            return f"no home range yet: {self.reason}"
        return (f"home range (minimum convex polygon of {self.n_stations} stations): {self.area_km2:.2f} km², "
                f"measured in UTM (EPSG:{self.epsg})")


def utm_epsg(lat: float, lon: float) -> int:
    """The EPSG code of the WGS84 UTM zone holding (``lat``, ``lon``): 326zz north of the equator, 327zz south.

    Zone ``zz = floor((lon + 180) / 6) + 1`` (1..60); longitude 180 belongs to zone 60."""
    lat, lon = _checked(lat, lon, what="the point")
    if not -80.0 <= lat <= 84.0:
        raise ValueError(f"latitude {lat} is outside UTM's -80..84")
    zone = min(int(math.floor((lon + 180.0) / 6.0)) + 1, 60)
    return (32600 if lat >= 0 else 32700) + zone


def _checked(lat: float, lon: float, *, what: str) -> tuple[float, float]:
    try:
        lat, lon = float(lat), float(lon)
    except (TypeError, ValueError):
        raise ValueError(f"{what}: latitude and longitude must be numbers, got {lat!r}, {lon!r}") from None
    if not (math.isfinite(lat) and -90.0 <= lat <= 90.0):
        raise ValueError(f"{what}: latitude {lat!r} is not between -90 and 90")
    if not (math.isfinite(lon) and -180.0 <= lon <= 180.0):
        raise ValueError(f"{what}: longitude {lon!r} is not between -180 and 180")
    return lat, lon


def minimum_convex_polygon(lats: Sequence[float], lons: Sequence[float]) -> HomeRange:
    """The MCP of the points (``lats[i]``, ``lons[i]``): its area in km² on the centroid's UTM zone, its corners,
    and, when it has no area, why (fewer than 3 distinct stations, or all of them on one line).

    The order of the points does not matter; repeated points count once. A latitude or longitude that is not a
    number or out of range is refused with a ``ValueError`` naming it."""
    if len(lats) != len(lons):
        raise ValueError(f"{len(lats)} latitudes but {len(lons)} longitudes: give one of each per station")
    points = [_checked(la, lo, what=f"station {i + 1}") for i, (la, lo) in enumerate(zip(lats, lons))]
    if not points:
        return HomeRange(0.0, 0, None, reason=f"no station with coordinates; {NEEDS}")
    lons_arr = np.array([p[1] for p in points])
    if lons_arr.max() - lons_arr.min() > 180.0:
        raise ValueError("the stations lie on both sides of the 180th meridian; this is not supported")
    epsg = utm_epsg(float(np.mean([p[0] for p in points])), float(lons_arr.mean()))
    to_utm = Transformer.from_crs("EPSG:4326", f"EPSG:{epsg}", always_xy=True)
    xs, ys = to_utm.transform(lons_arr, np.array([p[0] for p in points]))
    xy = np.column_stack([np.atleast_1d(xs), np.atleast_1d(ys)])
    keep = _distinct(xy)
    xy, kept = xy[keep], [points[i] for i in keep]
    n = len(kept)
    if n < 3:
        return HomeRange(0.0, n, epsg, reason=f"seen at {n} station{'s' if n != 1 else ''}; {NEEDS}")
    span = float(np.max(np.linalg.norm(xy[:, None, :] - xy[None, :, :], axis=-1)))
    try:
        hull = ConvexHull(xy)
    except QhullError:  # Qhull refuses a flat input: every station on one line
        hull = None
    if hull is None or hull.volume < COLLINEAR_M * span:
        return HomeRange(0.0, n, epsg, reason=f"its {n} stations lie on one line; {NEEDS}")
    corners = [int(i) for i in hull.vertices]  # counter-clockwise in 2-D
    return HomeRange(area_km2=float(hull.volume) / 1e6, n_stations=n, epsg=epsg,
                     hull_lats=tuple(kept[i][0] for i in corners), hull_lons=tuple(kept[i][1] for i in corners))


def mcp_area_km2(lats: Sequence[float], lons: Sequence[float]) -> float:
    """The area in km² of the minimum convex polygon of the points, on the centroid's UTM zone (0 when fewer than
    3 distinct stations or all on one line; :func:`minimum_convex_polygon` also says why)."""
    return minimum_convex_polygon(lats, lons).area_km2


def _distinct(xy: np.ndarray) -> list[int]:
    """Indices of the first of each group of points closer than SAME_STATION_M to one kept before."""
    keep: list[int] = []
    for i, p in enumerate(xy):
        if all(np.hypot(*(p - xy[j])) >= SAME_STATION_M for j in keep):
            keep.append(i)
    return keep
