"""core.field.stations: local timestamps, deployments as Camtrap DP states them, unique ids, events (photos of one
deployment within 60 s of the previous one), a deployment's active days and which deployment was active when.
Every expected value is worked out by hand in the comments."""

from __future__ import annotations

import math
import random
from datetime import date, datetime, timedelta, timezone

import pytest

from core.field.stations import (
    EVENT_GAP_S,
    DeploymentSpec,
    ParsedTime,
    StationError,
    active_days,
    check_unique_ids,
    deployment_at,
    deployment_spec,
    group_events,
    parse_timestamp,
)

MINUS_4 = timezone(timedelta(hours=-4))  # Pantanal (America/Cuiaba), no daylight saving
PLUS_5_30 = timezone(timedelta(hours=5, minutes=30))


def _row(**cells: str) -> dict[str, str]:
    """A deployments CSV row (Camtrap DP column names) with a valid id, start and end unless given."""
    return {"deploymentID": "CT-01-2024", "deploymentStart": "2024-05-01T06:00:00-04:00",
            "deploymentEnd": "2024-05-31T18:00:00-04:00", **cells}


# --------------------------------------------------------------------------- parse_timestamp


@pytest.mark.parametrize("text, expected", [
    ("2024-05-01T12:00:00-04:00", datetime(2024, 5, 1, 12, 0, tzinfo=MINUS_4)),
    ("2024-05-01T12:00:00+05:30", datetime(2024, 5, 1, 12, 0, tzinfo=PLUS_5_30)),
    ("2024-05-01T16:00:00Z", datetime(2024, 5, 1, 16, 0, tzinfo=timezone.utc)),
    ("2024-05-01 12:00:00-04:00", datetime(2024, 5, 1, 12, 0, tzinfo=MINUS_4)),  # a space for the T
    ("  2024-05-01T12:00:00.250-04:00 ", datetime(2024, 5, 1, 12, 0, 0, 250000, tzinfo=MINUS_4)),
    ("2024:05:01 12:00:00-04:00", datetime(2024, 5, 1, 12, 0, tzinfo=MINUS_4)),  # EXIF's form, with an offset
])
def test_a_time_with_an_offset_keeps_it(text, expected):
    parsed = parse_timestamp(text, default_offset=timedelta(hours=2))  # the default is not taken
    assert parsed.when == expected and parsed.when.utcoffset() == expected.utcoffset()
    assert parsed.offset_assumed is False
    assert parsed.iso() == expected.isoformat()


def test_z_is_utc_and_the_same_instant_as_its_local_time():
    utc = parse_timestamp("2024-05-01T16:00:00Z").when
    local = parse_timestamp("2024-05-01T12:00:00-04:00").when
    assert utc == local and utc.utcoffset() == timedelta(0)  # 12:00 at -4 h is 16:00 UTC


def test_exif_time_without_an_offset_takes_the_deployments():
    parsed = parse_timestamp("2024:05:01 21:14:05", default_offset=timedelta(hours=-4))
    assert parsed == ParsedTime(datetime(2024, 5, 1, 21, 14, 5, tzinfo=MINUS_4), offset_assumed=True)
    assert parsed.iso() == "2024-05-01T21:14:05-04:00"


@pytest.mark.parametrize("text", ["2024-05-01T21:14:05", "2024-05-01 21:14:05"])
def test_a_time_without_an_offset_takes_the_default_and_says_so(text):
    parsed = parse_timestamp(text, default_offset=timedelta(hours=5, minutes=30))
    assert parsed.when == datetime(2024, 5, 1, 21, 14, 5, tzinfo=PLUS_5_30)
    assert parsed.offset_assumed is True


def test_a_date_alone_is_midnight_in_the_default_offset():
    parsed = parse_timestamp("2024-05-01", default_offset=timedelta(hours=-4))
    assert parsed.when == datetime(2024, 5, 1, 0, 0, tzinfo=MINUS_4) and parsed.offset_assumed
    assert parse_timestamp(date(2024, 5, 1), default_offset=timedelta(0)).when == \
        datetime(2024, 5, 1, tzinfo=timezone.utc)


def test_datetimes_are_taken_as_they_are():
    aware = datetime(2024, 5, 1, 12, tzinfo=MINUS_4)
    assert parse_timestamp(aware) == ParsedTime(aware, offset_assumed=False)
    naive = datetime(2024, 5, 1, 12)
    assert parse_timestamp(naive, default_offset=timedelta(hours=-4)) == ParsedTime(aware, offset_assumed=True)


@pytest.mark.parametrize("text", ["2024-05-01T21:14:05", "2024:05:01 21:14:05", "2024-05-01"])
def test_a_time_without_an_offset_and_no_default_is_refused(text):
    with pytest.raises(StationError, match=rf"photo 7 timestamp '{text}' has no time zone and there is no "
                                           "deployment time zone to take"):
        parse_timestamp(text, what="photo 7 timestamp")


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01T00:00:00-04:00", "2024-02-30T12:00:00Z", "12:00:00",
                                  "2024-05-01T25:00:00-04:00", "2024/05/01 12:00", "2024-05-01T12:00:00-04:00 ok"])
def test_garbage_is_refused_naming_it(text):
    with pytest.raises(StationError, match="is not an ISO 8601 date-time") as err:
        parse_timestamp(text, default_offset=timedelta(0), what="media m-1 timestamp")
    assert str(err.value).startswith(f"media m-1 timestamp {text!r}")


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_timestamp_is_refused(text):
    with pytest.raises(StationError, match="^deploymentStart: empty$"):
        parse_timestamp(text, default_offset=timedelta(0), what="deploymentStart")


# --------------------------------------------------------------------------- deployment_spec


def test_a_deployments_row_becomes_a_spec_with_its_other_fields_kept():
    spec = deployment_spec(_row(locationID="L-07", locationName=" Porto Jofre ", latitude="-17.3602",
                                longitude="-56.7755", cameraID="CAM-7731", cameraModel="Reconyx-HyperFire2",
                                habitat="gallery forest", cameraHeight="0.5", setupBy="", featureType=None))
    assert spec.key == "CT-01-2024"
    assert spec.start == datetime(2024, 5, 1, 6, tzinfo=MINUS_4)
    assert spec.end == datetime(2024, 5, 31, 18, tzinfo=MINUS_4)
    assert (spec.location_id, spec.location_name, spec.lat, spec.lon) == ("L-07", "Porto Jofre", -17.3602, -56.7755)
    assert (spec.camera_id, spec.camera_model) == ("CAM-7731", "Reconyx-HyperFire2")
    assert dict(spec.details) == {"habitat": "gallery forest", "cameraHeight": "0.5"}  # empty cells are missing
    assert spec.offset == timedelta(hours=-4)
    assert spec.location == "L-07" and spec.has_coordinates


def test_a_spec_names_its_station_by_location_id_then_name_then_its_own_id():
    assert deployment_spec(_row(locationName="Porto Jofre")).location == "Porto Jofre"
    bare = deployment_spec(_row(latitude="", longitude=""))
    assert bare.location == "CT-01-2024"
    assert not bare.has_coordinates and (bare.lat, bare.lon) == (None, None)
    assert dict(bare.details) == {}


def test_an_end_without_an_offset_takes_the_starts():
    spec = deployment_spec(_row(deploymentStart="2024-05-01T06:00:00+05:30", deploymentEnd="2024-05-02T06:00:00"))
    assert spec.end == datetime(2024, 5, 2, 6, tzinfo=PLUS_5_30)


@pytest.mark.parametrize("cells, message", [
    ({"deploymentID": " "}, "^deployment: no deploymentID$"),
    ({"deploymentStart": ""}, r"^deployment 'CT-01-2024': deploymentStart and deploymentEnd are required$"),
    ({"deploymentEnd": None}, r"^deployment 'CT-01-2024': deploymentStart and deploymentEnd are required$"),
    ({"deploymentStart": "2024-05-01T06:00:00"},
     r"^deployment 'CT-01-2024' deploymentStart '2024-05-01T06:00:00' has no time zone"),
    ({"deploymentEnd": "end of May"}, r"^deployment 'CT-01-2024' deploymentEnd 'end of May' is not an ISO 8601"),
    ({"deploymentEnd": "2024-04-30T18:00:00-04:00"},
     r"^deployment 'CT-01-2024': it ends \(2024-04-30T18:00:00-04:00\) before it starts "
     r"\(2024-05-01T06:00:00-04:00\)$"),
    ({"latitude": "-17.36"}, "^deployment 'CT-01-2024': give both latitude and longitude, or neither$"),
    ({"longitude": "-56.77"}, "^deployment 'CT-01-2024': give both latitude and longitude, or neither$"),
    ({"latitude": "-97.1", "longitude": "-56.77"}, r"^deployment 'CT-01-2024': latitude -97.1 is outside -90..90$"),
    ({"latitude": "17.1", "longitude": "183"}, r"^deployment 'CT-01-2024': longitude 183.0 is outside -180..180$"),
    ({"latitude": "nan", "longitude": "-56.77"}, r"^deployment 'CT-01-2024': latitude nan is outside -90..90$"),
    ({"latitude": "-17,36", "longitude": "-56.77"}, r"^deployment 'CT-01-2024': latitude '-17,36' is not a number$"),
    ({"latitude": "-17.36", "longitude": "W56"}, r"^deployment 'CT-01-2024': longitude 'W56' is not a number$"),
])
def test_a_bad_deployment_is_refused_naming_it(cells, message):
    with pytest.raises(StationError, match=message):
        deployment_spec(_row(**cells))


def test_an_end_before_the_start_is_compared_as_instants():
    # 2024-05-01T06:00-04:00 is 10:00 UTC; an end at 09:00Z is an hour before it, one at 11:00Z after it
    with pytest.raises(StationError, match="ends .* before it starts"):
        deployment_spec(_row(deploymentEnd="2024-05-01T09:00:00Z"))
    assert deployment_spec(_row(deploymentEnd="2024-05-01T11:00:00Z")).end == \
        datetime(2024, 5, 1, 7, tzinfo=MINUS_4)


def test_the_edges_of_the_world_are_allowed_and_a_zero_length_deployment_too():
    spec = deployment_spec(_row(latitude="-90", longitude="180", deploymentEnd="2024-05-01T06:00:00-04:00"))
    assert (spec.lat, spec.lon) == (-90.0, 180.0) and spec.start == spec.end


def test_a_spec_made_directly_is_checked_too():
    start = datetime(2024, 5, 1, tzinfo=MINUS_4)
    with pytest.raises(StationError, match="needs an id"):
        DeploymentSpec(key="", start=start, end=start)
    with pytest.raises(StationError, match="longer than 200 characters"):
        DeploymentSpec(key="x" * 201, start=start, end=start)
    with pytest.raises(StationError, match="^deployment 'D': end needs a date-time with a time zone$"):
        DeploymentSpec(key="D", start=start, end=datetime(2024, 5, 2))
    with pytest.raises(StationError, match="latitude inf"):
        DeploymentSpec(key="D", start=start, end=start, lat=math.inf, lon=0.0)


# --------------------------------------------------------------------------- check_unique_ids


def test_unique_ids_pass():
    check_unique_ids(["a", "b", "c"], what="deploymentID")
    check_unique_ids([], what="deploymentID")


def test_duplicate_ids_are_named_with_how_often():
    with pytest.raises(StationError, match=r"^duplicate deploymentID: 'CT-01' \(2x\), 'CT-03' \(3x\)$"):
        check_unique_ids(["CT-01", "CT-02", "CT-03", "CT-01", "CT-03", "CT-03"], what="deploymentID")


def test_many_duplicates_name_ten_and_count_the_rest():
    ids = [f"m{k:02d}" for k in range(13)] * 2  # 13 ids, each twice
    with pytest.raises(StationError) as err:
        check_unique_ids(ids, what="mediaID")
    text = str(err.value)
    assert text.startswith("duplicate mediaID: 'm00' (2x), ") and text.endswith("'m09' (2x) and 3 more")
    assert "'m10'" not in text


# --------------------------------------------------------------------------- group_events


def _at(*seconds: float) -> list[datetime]:
    t0 = datetime(2024, 5, 1, 21, 0, 0, tzinfo=MINUS_4)
    return [t0 + timedelta(seconds=s) for s in seconds]


def test_events_by_hand():
    # gaps: 30, 29 (join), 121 (new), 20 (join), 100 (new)
    assert group_events(_at(0, 30, 59, 180, 200, 300), gap_s=60) == [0, 0, 0, 1, 1, 2]
    assert EVENT_GAP_S == 60.0
    assert group_events(_at(0, 30, 59, 180, 200, 300)) == [0, 0, 0, 1, 1, 2]  # 60 s by default


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 7, 42])
def test_the_input_order_does_not_matter(seed):
    seconds = [0, 30, 59, 180, 200, 300]
    expected = dict(zip(seconds, [0, 0, 0, 1, 1, 2]))
    shuffled = seconds[:]
    random.Random(seed).shuffle(shuffled)
    assert group_events(_at(*shuffled), gap_s=60) == [expected[s] for s in shuffled]


def test_a_gap_of_exactly_the_limit_joins_and_one_microsecond_more_splits():
    assert group_events(_at(0, 60, 120), gap_s=60) == [0, 0, 0]  # chained: each 60 s after the previous
    assert group_events(_at(0, 60.000001), gap_s=60) == [0, 1]


def test_a_gap_of_zero_joins_only_photos_taken_at_the_same_instant():
    assert group_events(_at(0, 0, 1, 1, 1, 5), gap_s=0) == [0, 0, 1, 1, 1, 2]
    # the same instant written in another offset is the same instant: 21:00 at -4 h is 01:00Z the next day
    utc = datetime(2024, 5, 2, 1, 0, 0, tzinfo=timezone.utc)
    assert group_events([*_at(0), utc, *_at(1)], gap_s=0) == [0, 0, 1]


def test_events_of_nothing_and_of_one_photo():
    assert group_events([]) == []
    assert group_events(_at(5)) == [0]


@pytest.mark.parametrize("gap", [-1, -0.001, math.nan])
def test_a_negative_or_missing_gap_is_refused(gap):
    with pytest.raises(StationError, match="the event gap must be at least 0 s"):
        group_events(_at(0, 30), gap_s=gap)


# --------------------------------------------------------------------------- active_days


def test_active_days_include_both_ends():
    days = active_days(datetime(2024, 5, 30, 18, tzinfo=MINUS_4), datetime(2024, 6, 2, 6, tzinfo=MINUS_4))
    assert days == [date(2024, 5, 30), date(2024, 5, 31), date(2024, 6, 1), date(2024, 6, 2)]


def test_a_deployment_within_one_day_was_active_on_that_day():
    assert active_days(datetime(2024, 5, 1, 6, tzinfo=MINUS_4), datetime(2024, 5, 1, 6, tzinfo=MINUS_4)) == \
        [date(2024, 5, 1)]
    assert active_days(datetime(2024, 2, 28, tzinfo=MINUS_4), datetime(2024, 3, 1, tzinfo=MINUS_4)) == \
        [date(2024, 2, 28), date(2024, 2, 29), date(2024, 3, 1)]  # a leap year


def test_active_days_are_local_days_whatever_offset_the_end_was_written_in():
    # 2024-05-03T01:00Z is 2024-05-02T21:00 at -4 h: the camera was not active on the 3rd, local time
    start = datetime(2024, 5, 1, 6, tzinfo=MINUS_4)
    assert active_days(start, datetime(2024, 5, 3, 1, tzinfo=timezone.utc)) == [date(2024, 5, 1), date(2024, 5, 2)]
    spec = deployment_spec(_row(deploymentEnd="2024-05-03T01:00:00Z"))
    assert active_days(spec.start, spec.end) == [date(2024, 5, 1), date(2024, 5, 2)]


# --------------------------------------------------------------------------- deployment_at


def test_the_deployment_active_at_a_time_ends_included_and_none_in_a_gap():
    # one station, its camera down from May 10 to May 20
    first = deployment_spec(_row(deploymentID="L7-a", locationID="L7", deploymentEnd="2024-05-10T12:00:00-04:00"))
    second = deployment_spec(_row(deploymentID="L7-b", locationID="L7", deploymentStart="2024-05-20T08:00:00-04:00"))
    both = [first, second]
    assert deployment_at(both, datetime(2024, 5, 5, tzinfo=MINUS_4)) is first
    assert deployment_at(both, datetime(2024, 5, 10, 12, tzinfo=MINUS_4)) is first  # its end
    assert deployment_at(both, datetime(2024, 5, 10, 12, 0, 1, tzinfo=MINUS_4)) is None  # a second later
    assert deployment_at(both, datetime(2024, 5, 15, tzinfo=MINUS_4)) is None
    assert deployment_at(both, datetime(2024, 5, 20, 12, tzinfo=timezone.utc)) is second  # 08:00 at -4 h: its start
    assert deployment_at(both, datetime(2024, 5, 20, 11, 59, tzinfo=timezone.utc)) is None
    assert deployment_at(both, datetime(2024, 5, 31, 18, tzinfo=MINUS_4)) is second
    assert deployment_at(both, datetime(2024, 6, 1, tzinfo=MINUS_4)) is None
    assert deployment_at([], datetime(2024, 5, 5, tzinfo=MINUS_4)) is None
    assert first.active_at(datetime(2024, 5, 1, 6, tzinfo=MINUS_4)) and not first.active_at(
        datetime(2024, 5, 1, 5, 59, tzinfo=MINUS_4))
