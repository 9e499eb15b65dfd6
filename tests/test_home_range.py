"""Home range (minimum convex polygon) on tiny cases worked out by hand.

A degree on the WGS84 ellipsoid (a = 6378.137 km, e² = 0.00669438) at latitude φ spans
  along a parallel:  (π/180) · a · cos φ / sqrt(1 - e² sin² φ)
  along a meridian:  (π/180) · a · (1 - e²) / (1 - e² sin² φ)^1.5
At the equator that is 111.320 km and 110.574 km; at -16.5° (cos 0.958820, sin² 0.080665) 106.764 km and
110.664 km. A 10 km square therefore spans 10/106.764 = 0.093665° of longitude and 10/110.664 = 0.090364° of
latitude at -16.5°, and its area is 100 km². UTM shrinks lengths by 0.9996 on its central meridian (areas by
0.08 %) and stretches them slightly away from it, well inside the 0.5 % asked for.
"""

from __future__ import annotations

import itertools
import math
import re

import pytest

from core.field.home_range import mcp_area_km2, minimum_convex_polygon, utm_epsg

A_KM, E2 = 6378.137, 0.00669438


def km_per_degree(lat: float) -> tuple[float, float]:
    """(km per degree of longitude, km per degree of latitude) at ``lat``, from the formulas above."""
    s2 = math.sin(math.radians(lat)) ** 2
    along_parallel = math.pi / 180 * A_KM * math.cos(math.radians(lat)) / math.sqrt(1 - E2 * s2)
    along_meridian = math.pi / 180 * A_KM * (1 - E2) / (1 - E2 * s2) ** 1.5
    return along_parallel, along_meridian


def square(lat0: float, lon0: float, side_km: float) -> tuple[list[float], list[float]]:
    """The corners of a square of ``side_km`` whose south-west corner is (lat0, lon0)."""
    per_lon, per_lat = km_per_degree(lat0 + side_km / 2 / 110.6)  # the degrees at the square's middle
    dlat, dlon = side_km / per_lat, side_km / per_lon
    return [lat0, lat0, lat0 + dlat, lat0 + dlat], [lon0, lon0 + dlon, lon0 + dlon, lon0]


def test_the_degree_lengths_used_below_are_the_hand_worked_ones():
    assert km_per_degree(0.0) == pytest.approx((111.320, 110.574), abs=0.001)
    assert km_per_degree(-16.5) == pytest.approx((106.764, 110.664), abs=0.001)


def test_utm_zone_from_a_point():
    assert utm_epsg(0.0, 33.0) == 32636  # zone 36 (30-36°E), north (the equator counts as north)
    assert utm_epsg(-16.5, 35.5) == 32736  # zone 36, south
    assert utm_epsg(51.5, -0.1) == 32630  # London: zone 30 north
    assert utm_epsg(-33.9, 18.4) == 32734  # Cape Town: zone 34 south
    assert utm_epsg(10.0, -180.0) == 32601 and utm_epsg(10.0, 180.0) == 32660
    with pytest.raises(ValueError, match="latitude 95.0 is not between -90 and 90"):
        utm_epsg(95.0, 0.0)


@pytest.mark.parametrize("lat0, lon0", [(0.0, 33.0), (-16.5, 35.5), (-16.5, 31.2)])
def test_a_10_km_square_is_100_km2_within_half_a_percent(lat0, lon0):
    lats, lons = square(lat0, lon0, 10.0)
    hr = minimum_convex_polygon(lats, lons)
    assert hr.area_km2 == pytest.approx(100.0, rel=0.005)
    assert hr.epsg == (32636 if lat0 >= 0 else 32736) and hr.n_stations == 4 and hr.reason is None
    assert sorted(hr.hull_lats) == sorted(lats) and sorted(hr.hull_lons) == sorted(lons)
    assert re.search(r"of 4 stations\): (99\.[5-9]\d|100\.[0-4]\d) km²", hr.words) and f"(EPSG:{hr.epsg})" in hr.words


def test_a_tenth_of_a_degree_at_the_equator():
    # 0.1° x 0.1° at the equator: 11.1320 km x 11.0574 km = 123.09 km²; on UTM's central meridian (33°E) the
    # scale 0.9996 makes it 123.09 x 0.9996² = 122.99 km²
    hr = minimum_convex_polygon([0.0, 0.0, 0.1, 0.1], [33.0, 33.1, 33.1, 33.0])
    assert hr.area_km2 == pytest.approx(123.09, rel=0.005)
    assert hr.area_km2 == pytest.approx(122.99, abs=0.02)


def test_the_order_of_the_points_and_repeats_do_not_matter():
    lats, lons = square(-16.5, 35.5, 10.0)
    lats, lons = lats + [lats[0] + 0.03], lons + [lons[0] + 0.02]  # a fifth point inside the square
    areas = {round(mcp_area_km2([lats[i] for i in order], [lons[i] for i in order]), 9)
             for order in itertools.permutations(range(5))}
    assert len(areas) == 1
    assert mcp_area_km2(lats + lats, lons + lons) == pytest.approx(areas.pop(), rel=1e-9)
    assert minimum_convex_polygon(lats, lons).n_stations == 5  # the inside point is a station, not a corner
    assert len(minimum_convex_polygon(lats, lons).hull_lats) == 4


def test_a_triangle_is_half_the_square():
    lats, lons = square(0.0, 33.0, 10.0)
    assert mcp_area_km2(lats[:3], lons[:3]) == pytest.approx(50.0, rel=0.005)


def test_fewer_than_three_stations_or_stations_on_a_line_have_no_area_and_say_why():
    none = minimum_convex_polygon([], [])
    needs = "a home range (minimum convex polygon) needs 3 stations not on one line"
    assert none.area_km2 == 0.0 and none.reason == f"no station with coordinates; {needs}"
    two = minimum_convex_polygon([-16.5, -16.6, -16.5], [35.5, 35.6, 35.5])  # the third repeats the first
    assert two.area_km2 == 0.0 and two.n_stations == 2
    assert two.reason == f"seen at 2 stations; {needs}"
    # no area is no home range yet, never a measured "0 km²"
    assert two.words == f"no home range yet: seen at 2 stations; {needs}" and "km²" not in two.words
    line = minimum_convex_polygon([-16.5, -16.6, -16.7, -16.8], [35.5, 35.5, 35.5, 35.5])  # along a meridian
    assert line.area_km2 == 0.0 and line.reason == f"its 4 stations lie on one line; {needs}"
    diagonal = minimum_convex_polygon([0.0, 0.01, 0.02], [33.0, 33.01, 33.02])
    assert diagonal.area_km2 == 0.0 and "on one line" in diagonal.reason
    assert mcp_area_km2([0.0, 0.01, 0.02], [33.0, 33.01, 33.02]) == 0.0


def test_bad_coordinates_are_refused_naming_them():
    with pytest.raises(ValueError, match="2 latitudes but 3 longitudes"):
        minimum_convex_polygon([0.0, 1.0], [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="station 2: longitude 200.0 is not between -180 and 180"):
        minimum_convex_polygon([0.0, 1.0, 2.0], [0.0, 200.0, 2.0])
    with pytest.raises(ValueError, match="station 1: latitude nan"):
        minimum_convex_polygon([float("nan"), 1.0, 2.0], [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="station 3: latitude and longitude must be numbers"):
        minimum_convex_polygon([0.0, 1.0, "north"], [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="180th meridian"):
        minimum_convex_polygon([0.0, 1.0, 0.5], [179.9, -179.9, 179.95])
