"""The capture-history writers for secr, camtrapR and MARK (core.field.capthist), on small cases worked by hand."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone

import pytest

from core.field.capthist import (
    CAMTRAPR_COLUMNS,
    Record,
    Trap,
    camtrapr_csv_text,
    camtrapr_rows,
    mark_inp_text,
    secr_captures_text,
    secr_token,
    secr_traps_text,
    usage_field,
    usage_matrix,
    utm_coordinates,
    utm_epsg,
)


def D(day: int, hour: int = 0) -> datetime:
    return datetime(2024, 5, day, hour)


# --------------------------------------------------------------------------- coordinates


def test_utm_zone_and_hemisphere():
    assert utm_epsg(-16.5, -56.5) == 32721  # Pantanal: zone 21 (-60..-54), south
    assert utm_epsg(51.5, -0.1) == 32630  # London: zone 30, north
    assert utm_epsg(0.0, 0.0) == 32631
    assert utm_epsg(-1.0, 180.0) == 32760  # the antimeridian stays in zone 60
    with pytest.raises(ValueError, match="latitude 85.0 is outside"):
        utm_epsg(85.0, 10.0)


def test_utm_coordinates_of_known_points():
    # on zone 21's central meridian (-57): false easting 500 000 m; at the equator south: false northing 10 000 km
    epsg, [(x0, y0), (x1, y1)] = utm_coordinates([(0.0, -57.0), (-16.5, -57.0)], epsg=32721)
    assert epsg == 32721
    assert x0 == pytest.approx(500_000, abs=0.01) and y0 == pytest.approx(10_000_000, abs=0.01)
    # 16.5 degrees of meridian ~ 1 825 km, times the scale factor 0.9996
    assert x1 == pytest.approx(500_000, abs=0.01) and 10_000_000 - y1 == pytest.approx(1_824_500, abs=2_000)
    # two Pantanal stations 0.02 degrees of longitude apart: 0.02 * 111.32 km * cos(16.5) ~ 2.13 km east
    epsg, [(a, b), (c, d)] = utm_coordinates([(-16.5, -56.5), (-16.5, -56.48)])
    assert epsg == 32721
    # (grid north turns ~0.14 degree from true north there: y drops ~5 m over the 2.1 km)
    assert c - a == pytest.approx(2134, abs=15) and 0 < b - d < 10
    with pytest.raises(ValueError, match="no point"):
        utm_coordinates([])


# --------------------------------------------------------------------------- usage


def test_usage_is_the_active_days_of_each_occasion_and_overlapping_deployments_count_once():
    occasions = [(D(1), D(2)), (D(2), D(3)), (D(3), D(4))]
    usage = usage_matrix({"A": [(D(1, 12), D(3))],
                          "B": [(D(1), D(2)), (D(1, 12), D(2, 12))],  # two cameras at once: union 05-01..05-02 12h
                          "C": [(D(1), D(1, 6)), (D(3, 18), D(5))]},  # a gap
                         occasions)
    assert usage == {"A": [0.5, 1.0, 0.0], "B": [1.0, 0.5, 0.0], "C": [0.25, 0.0, 0.25]}
    with pytest.raises(ValueError, match="ends before it begins"):
        usage_matrix({"A": [(D(2), D(1))]}, occasions)


def test_usage_field_numbers_or_binary_string():
    assert usage_field([0.5, 1.0, 0.0]) == "0.5 1 0"
    assert usage_field([1 / 3, 2.0]) == "0.3333 2"
    assert usage_field([0.5, 1.0, 0.0], binary=True) == "110"


# --------------------------------------------------------------------------- secr


def test_secr_captures_one_line_per_individual_occasion_detector():
    text = secr_captures_text([("jaguar", "Ana", 2, "L1"), ("jaguar", "Ana", 2, "L1"), ("jaguar", "Bia", 1, "L2"),
                               ("jaguar", "Ana", 1, "Station 3"), ("jaguar", "Ana", 1, "L1")],
                              header=["made by hand"])
    assert text.splitlines() == ["# made by hand", "# Session ID Occasion Detector",
                                 "jaguar Ana 1 L1", "jaguar Ana 1 Station_3", "jaguar Ana 2 L1", "jaguar Bia 1 L2"]
    with pytest.raises(ValueError, match="count from 1, got 0 for 'Ana'"):
        secr_captures_text([("jaguar", "Ana", 0, "L1")])


def test_secr_names_lose_white_space_comment_and_covariate_marks():
    assert secr_token(" Ponto  #4 / norte ") == "Ponto_4_norte"
    with pytest.raises(ValueError, match="empty name"):
        secr_token("  ")


def test_secr_traps_lines_with_usage():
    traps = [Trap("L1", 553361.2965, 8175689.9855, (0.5, 1.0, 0.0)), Trap("L 2", 10.0, 20.0, (1.0, 0.0, 2.0))]
    assert secr_traps_text(traps).splitlines()[-2:] == ["L1 553361.30 8175689.99 0.5 1 0", "L_2 10.00 20.00 1 0 2"]
    assert secr_traps_text(traps, binary=True).splitlines()[-2:] == ["L1 553361.30 8175689.99 110",
                                                                     "L_2 10.00 20.00 101"]
    with pytest.raises(ValueError, match="share the name 'L_2'"):
        secr_traps_text([Trap("L 2", 0, 0, (1.0,)), Trap("L_2", 1, 1, (1.0,))])
    with pytest.raises(ValueError, match="different numbers of occasions"):
        secr_traps_text([Trap("A", 0, 0, (1.0,)), Trap("B", 1, 1, (1.0, 1.0))])


# --------------------------------------------------------------------------- MARK


def test_mark_inp_lines():
    text = mark_inp_text({"Ana": [0, 1, 0, 1, 0, 0, 1], "Bia": [1, 0, 0, 0, 0, 0, 0]}, header=["jaguars"])
    assert text.splitlines() == ["/* jaguars */", "/* Ana */ 0101001 1;", "/* Bia */ 1000000 1;"]
    assert mark_inp_text({"a*/b": [1]}).strip() == "/* a* /b */ 1 1;"  # a name cannot close the comment
    with pytest.raises(ValueError, match="different lengths"):
        mark_inp_text({"Ana": [1, 0], "Bia": [1]})


# --------------------------------------------------------------------------- camtrapR


def test_camtrapr_rows_delta_since_previous_record_of_the_individual_at_the_station():
    recs = [Record("L1", "Panthera onca", "Ana", datetime(2024, 5, 2, 6, 30), "cam1", "c.jpg"),
            Record("L1", "Panthera onca", "Ana", datetime(2024, 5, 1, 10, 0), "cam1", "a.jpg"),
            Record("L1", "Panthera onca", "Bia", datetime(2024, 5, 1, 11, 0), "cam1", "b.jpg"),
            Record("L2", "Panthera onca", "Ana", datetime(2024, 5, 1, 12, 0), "", "d.jpg")]
    rows = camtrapr_rows(recs)
    assert [(r["Station"], r["Individual"], r["FileName"], r["delta.time.secs"]) for r in rows] == [
        ("L1", "Ana", "a.jpg", 0), ("L1", "Ana", "c.jpg", 73800), ("L1", "Bia", "b.jpg", 0),
        ("L2", "Ana", "d.jpg", 0)]
    second = rows[1]  # 20.5 hours later
    assert (second["delta.time.mins"], second["delta.time.hours"], second["delta.time.days"]) == (1230.0, 20.5, 0.9)
    assert (second["DateTimeOriginal"], second["Date"], second["Time"]) == ("2024-05-02 06:30:00", "2024-05-02",
                                                                            "06:30:00")
    parsed = list(csv.DictReader(io.StringIO(camtrapr_csv_text(recs))))
    assert tuple(parsed[0]) == CAMTRAPR_COLUMNS
    assert parsed[1]["delta.time.secs"] == "73800"


def test_camtrapr_defuses_formula_names_and_refuses_aware_times():
    text = camtrapr_csv_text([Record("=HYPERLINK(1)", "sp", "Ana", datetime(2024, 5, 1), "", "a.jpg")])
    assert list(csv.DictReader(io.StringIO(text)))[0]["Station"] == "'=HYPERLINK(1)"
    with pytest.raises(ValueError, match="naive local time"):
        camtrapr_rows([Record("L1", "sp", "Ana", datetime(2024, 5, 1, tzinfo=timezone.utc), "", "a.jpg")])
    assert camtrapr_rows([]) == []
