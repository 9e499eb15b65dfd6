"""An individual's page (issue 23): first and last seen with where each time came from, counts of sightings and
stations, the best photo per flank, the home range, and sex and life stage set by a curator (audited; a viewer is
refused), from ORM rows built here and from ``rosette individual``.

The stations make a right triangle with 10 km legs at -16.5° (the hand-worked degrees of tests/test_home_range.py:
10 km is 0.093665° of longitude and 0.090364° of latitude there), so the home range is 50 km²."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from app.cli import main as cli
from db.audit import audit_rows
from db.field.individual_history import IndividualHistory, SeenAt, Station, best_photo_key, crop_pixels, local_time
from db.models import DecisionKind, Deployment, Flank, Image, Individual, MatchDecision, Photo, Sighting
from db.session import open_catalogue
from db.users import PermissionDenied, add_user
from jobs.actions.individuals import (
    BEST_PHOTO_RULE,
    IndividualPage,
    individual_history,
    set_individual_traits,
    station_map_figure,
    timeline_figure,
)
from jobs.requests.individuals import IndividualHistoryRequest, SetTraitsRequest

DLON, DLAT = 0.093665, 0.090364  # 10 km at -16.5°
A = (-16.5, 35.5)  # Waterhole A (two deployments: the camera was down in between)
B = (-16.5, 35.5 + DLON)  # Ridge B, 10 km east
ROAD = (-16.5 + DLAT, 35.5)  # Old road (a sighting's place, no deployment), 10 km north
PASSWORD = "correct horse"


def _photo(s, k: int, *, deployment=None, sighting=None, taken_at=None, exif_time=None,
           size=(1000, 800)) -> Photo:
    p = Photo(content_hash=f"h{k:03d}", original_name=f"p{k}.jpg", blob_path=f"images/h{k:03d}.jpg", format="JPEG",
              mode="RGB", width=size[0], height=size[1], size_bytes=1, deployment=deployment, sighting=sighting,
              taken_at=taken_at, exif_time=exif_time)
    s.add(p)
    return p


def _annotation(s, photo: Photo, individual: Individual, flank: str, box: tuple[float, float], *,
                masked: bool = False) -> Image:
    ann = Image(photo=photo, content_hash=photo.content_hash, original_name=photo.original_name,
                blob_path=photo.blob_path, format="JPEG", mode="RGB", width=photo.width, height=photo.height,
                size_bytes=1, exif_time=photo.exif_time, bbox_x=0.0, bbox_y=0.0, bbox_w=box[0], bbox_h=box[1],
                flank=Flank(flank), individual=individual, sighting=photo.sighting,
                mask_path=f"masks/m{photo.id}-{flank}.png" if masked else None)
    s.add(ann)
    return ann


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Amani: 8 annotations on 6 photos, 4 sightings, 3 stations; Baraka shares a photo; Lone has 2 stations."""
    data_dir = tmp_path_factory.mktemp("individual-page") / "rosette-data"
    data_dir.mkdir()
    cat = open_catalogue(data_dir)
    ids = {}
    with cat.unit_of_work() as s:
        def dep(key, loc, name, where):
            d = Deployment(key=key, location_id=loc, location_name=name, lat=where[0], lon=where[1],
                           start="2024-04-01T00:00:00+02:00", end="2024-08-01T00:00:00+02:00")
            s.add(d)
            return d

        a1, a2, b = dep("dep-A1", "A", "Waterhole A", A), dep("dep-A2", "A", "Waterhole A", A), \
            dep("dep-B", "B", "Ridge B", B)
        s.flush()
        s1, s2, s3 = (Sighting(key=k, deployment_id=d.id) for k, d in (("s1", a1), ("s2", a2), ("s3", b)))
        s4 = Sighting(key="s4", date="2024-04-02", place="Old road", lat=ROAD[0], lon=ROAD[1])
        s5 = Sighting(key="s5", deployment_id=b.id, place="ignored: the deployment wins")
        s.add_all([s1, s2, s3, s4, s5])
        amani, baraka, lone, kito = (Individual(name=n) for n in ("Amani", "Baraka", "Lone", "Kito"))
        s.add_all([amani, baraka, lone, kito])
        p1 = _photo(s, 1, deployment=a1, sighting=s1, taken_at="2024-05-01T06:12:00+02:00")
        p2 = _photo(s, 2, deployment=a2, sighting=s2, taken_at="2024-05-20T21:30:00+02:00")
        p3 = _photo(s, 3, deployment=b, sighting=s3, taken_at="2024-06-03T05:00:00+02:00")
        p4 = _photo(s, 4, sighting=s4)  # no deployment, no photo time: the sighting's date and place
        p5 = _photo(s, 5, exif_time="2024:07:01 10:00:00")  # only an EXIF time, no place
        p6 = _photo(s, 6)  # nothing known
        p7 = _photo(s, 7, sighting=s5)  # no deployment of its own: its sighting's
        s.flush()
        ann = {
            # left: the small one a curator confirmed and masked beats two larger ones
            "a1": _annotation(s, p1, amani, "left", (0.5, 0.5)),  # 500 x 400 px
            "a2": _annotation(s, p2, amani, "left", (0.2, 0.2), masked=True),  # 200 x 160 px, confirmed below
            "a3": _annotation(s, p3, amani, "left", (0.9, 0.9)),
            # right: both masked, same crop: the more recent (EXIF 2024-07-01 after the sighting's 2024-04-02)
            "a4": _annotation(s, p4, amani, "right", (0.5, 0.5), masked=True),
            "a5": _annotation(s, p5, amani, "right", (0.5, 0.5), masked=True),
            # front: the larger crop beats the more recent
            "a8": _annotation(s, p3, amani, "front", (0.4, 0.4)),
            "a9": _annotation(s, p1, amani, "front", (0.5, 0.5)),
            "a6": _annotation(s, p6, amani, "unknown", (1.0, 1.0)),
            "baraka": _annotation(s, p1, baraka, "left", (0.3, 0.3)),  # another animal in photo 1
            "baraka2": _annotation(s, p7, baraka, "left", (0.3, 0.3)),
            "lone1": _annotation(s, p1, lone, "right", (0.3, 0.3)),
            "lone2": _annotation(s, p3, lone, "right", (0.3, 0.3)),
            "kito": _annotation(s, p2, kito, "left", (0.3, 0.3)),
        }
        s.flush()
        s.add(MatchDecision(query_image_id=ann["a2"].id, decision=DecisionKind.same, candidate_individual_id=amani.id,
                            user="cora"))
        # an undone decision confirms nothing
        s.add(MatchDecision(query_image_id=ann["a3"].id, decision=DecisionKind.same, candidate_individual_id=amani.id,
                            user="cora", undone_at=datetime(2024, 6, 4)))
        s.commit()
        ids = {k: v.id for k, v in ann.items()} | {"amani": amani.id, "baraka": baraka.id, "lone": lone.id,
                                                  "kito": kito.id}
    add_user(cat, "ada", PASSWORD, role="admin", by="test")
    add_user(cat, "cora", PASSWORD, role="curator", by="ada")
    add_user(cat, "vera", PASSWORD, role="viewer", by="ada")
    yield cat, ids, data_dir
    cat.close()


def test_first_and_last_seen_say_where_their_time_came_from(built):
    cat, ids, _ = built
    h = individual_history(cat, IndividualHistoryRequest(ids["amani"])).history
    first, last = h.first_seen, h.last_seen
    assert (first.annotation_id, first.when, first.when_source) == (ids["a4"], datetime(2024, 4, 2), "sighting date")
    assert first.station == "Old road" and first.sighting == "s4"
    assert (last.annotation_id, last.when, last.when_source) == (ids["a5"], datetime(2024, 7, 1, 10), "EXIF time")
    assert last.station is None
    # the photo's own time (with its offset) wins over everything else; ordered by local wall-clock time
    timed = [(s.annotation_id, s.when_source) for s in h.timed]
    assert timed == [(ids["a4"], "sighting date"), (ids["a1"], "photo time"), (ids["a9"], "photo time"),
                     (ids["a2"], "photo time"), (ids["a3"], "photo time"), (ids["a8"], "photo time"),
                     (ids["a5"], "EXIF time")]
    assert h.seen[-1].annotation_id == ids["a6"] and h.seen[-1].when is None  # no time: listed last, not lost


def test_counts_of_annotations_photos_sightings_and_stations(built):
    cat, ids, _ = built
    page = individual_history(cat, IndividualHistoryRequest(ids["amani"]))
    h = page.history
    assert (h.n_annotations, h.n_photos, h.n_sightings, h.n_stations) == (8, 6, 4, 3)
    assert (h.n_without_time, h.n_without_station) == (1, 2)  # a6 has no time; a5 and a6 no place
    stations = {s.name: s for s in h.stations}
    assert set(stations) == {"Waterhole A", "Ridge B", "Old road"}
    wa = stations["Waterhole A"]  # two deployments of location A are one station
    assert (wa.source, wa.n_annotations, wa.n_sightings, wa.lat, wa.lon) == ("deployment", 3, 2, *A)
    assert (stations["Old road"].source, stations["Old road"].n_sightings) == ("sighting", 1)
    assert page.facts() == ("First seen 2024-04-02 (sighting date) at Old road; last seen 2024-07-01 10:00 "
                            "(EXIF time); 4 sightings at 3 stations (6 photos, 8 annotations). 1 annotation has no "
                            "readable time. 2 annotations have no deployment and no sighting place.")
    # Baraka, in one of the same photos, is counted on its own; a photo without a deployment of its own is at
    # its sighting's deployment
    other = individual_history(cat, IndividualHistoryRequest(ids["baraka"])).history
    assert (other.n_annotations, other.n_sightings, other.n_stations) == (2, 2, 2)
    assert {(st.name, st.source, st.lat, st.lon) for st in other.stations} == {("Waterhole A", "deployment", *A),
                                                                               ("Ridge B", "deployment", *B)}


def test_the_best_photo_per_flank_follows_the_stated_rule(built):
    cat, ids, _ = built
    h = individual_history(cat, IndividualHistoryRequest(ids["amani"])).history
    best = {b.flank: b for b in h.best_photos}
    assert [b.flank for b in h.best_photos] == ["left", "right", "front", "unknown"]  # the flanks it has, in order
    assert best["left"].annotation_id == ids["a2"]  # confirmed and masked, though the smallest crop
    assert (best["left"].confirmed, best["left"].masked, best["left"].crop_px, best["left"].n_candidates) == \
        (True, True, 200 * 160, 3)
    assert best["right"].annotation_id == ids["a5"]  # same crop, both masked: the more recent
    assert best["front"].annotation_id == ids["a9"]  # 500 x 400 px beats the more recent 400 x 320 px
    assert "identity confirmed by a curator" in best["left"].why and "crop 32,000 px" in best["left"].why
    page = individual_history(cat, IndividualHistoryRequest(ids["amani"]))
    assert page.best_photo_reasons()[0] == (f"#{ids['a2']} (left flank; best of 3): identity confirmed by a curator, "
                                            "masked, crop 32,000 px, 2024-05-20T21:30:00+02:00")
    assert page.best_pictures == []  # these rows have no stored files: nothing to show, nothing made up
    assert "confirmed" in BEST_PHOTO_RULE and "mask" in BEST_PHOTO_RULE and "largest crop" in BEST_PHOTO_RULE


def test_the_best_photo_key_ranks_confirmation_then_mask_then_crop_then_time():
    def key(**kw):
        base = dict(confirmed=False, masked=False, crop_px=100, when=datetime(2024, 1, 1), annotation_id=1)
        return best_photo_key(**(base | kw))

    assert key(confirmed=True, crop_px=1) > key(masked=True, crop_px=10_000)
    assert key(masked=True, crop_px=1) > key(crop_px=10_000)
    assert key(crop_px=101, when=datetime(2000, 1, 1)) > key(crop_px=100, when=datetime(2030, 1, 1))
    assert key(when=datetime(2024, 1, 2)) > key(when=datetime(2024, 1, 1)) > key(when=None, annotation_id=9)
    ann = Image(bbox_w=0.25, bbox_h=0.5, width=1001, height=600)
    assert crop_pixels(ann) == 250 * 300  # round(250.25) x 300


def test_local_time_reads_iso_dates_times_and_exif_and_nothing_else():
    assert local_time("2024-05-01T06:12:00+02:00") == datetime(2024, 5, 1, 6, 12)  # wall clock, offset dropped
    assert local_time("2024:07:01 10:00:00") == datetime(2024, 7, 1, 10)
    assert local_time("2024-04-02") == datetime(2024, 4, 2)
    assert local_time("spring 2019") is None and local_time("") is None and local_time(None) is None


def test_the_home_range_of_three_stations_is_the_hand_worked_triangle(built):
    cat, ids, _ = built
    page = individual_history(cat, IndividualHistoryRequest(ids["amani"]))
    hr = page.history.home_range
    assert hr.area_km2 == pytest.approx(50.0, rel=0.005) and hr.n_stations == 3 and hr.epsg == 32736
    assert page.home_range().startswith("Home range (minimum convex polygon of 3 stations): 50.")
    lone = individual_history(cat, IndividualHistoryRequest(ids["lone"]))
    assert lone.history.home_range.area_km2 == 0.0
    assert lone.home_range() == ("No home range yet: seen at 2 stations; a home range (minimum convex polygon) "
                                 "needs 3 stations not on one line.")
    assert lone.to_dict()["home_range"]["mcp_km2"] is None  # no 0 km² to read as a measured area


def test_the_charts_are_plain_scatter_plots_without_map_tiles(built):
    cat, ids, _ = built
    page = individual_history(cat, IndividualHistoryRequest(ids["amani"]))
    timeline = timeline_figure(page)
    assert {t.type for t in timeline.data} == {"scatter"}
    assert sum(len(t.x) for t in timeline.data) == 7  # the 7 annotations with a time
    assert "(no station)" in {y for t in timeline.data for y in t.y}  # a5's EXIF time, no place
    station_map = station_map_figure(page)
    assert {t.type for t in station_map.data} == {"scatter"}  # no scattermapbox / tiles: works offline
    names = station_map.data[-1]
    assert sorted(names.text) == ["Old road", "Ridge B", "Waterhole A"]
    assert station_map.data[0].fill == "toself"  # the home range polygon
    assert station_map.layout.xaxis.scaleanchor == "y"


def test_names_in_the_charts_are_drawn_as_text_never_as_markup():
    h = IndividualHistory(id=1, name="<b>Bold</b>", active=True, species="", sex=None, life_stage=None,
                          n_annotations=1, n_photos=1, n_sightings=1,
                          seen=[SeenAt(1, 1, "left", datetime(2024, 1, 1), "2024-01-01", "sighting date", "<i>X</i>",
                                       "place <i>X</i>", "<a href='x'>s</a>")],
                          stations=[Station("place <i>X</i>", "<i>X</i>", "sighting", -16.5, 35.5, 1, 1)])
    page = IndividualPage(history=h, best_pictures=[])
    assert station_map_figure(page).data[-1].text == ("&lt;i&gt;X&lt;/i&gt;",)
    timeline = timeline_figure(page)
    assert "&lt;b&gt;Bold&lt;/b&gt;" in timeline.layout.title.text and timeline.data[0].y == ("&lt;i&gt;X&lt;/i&gt;",)
    assert "<a" not in timeline.data[0].hovertext[0] and "<i>" not in timeline.data[0].hovertext[0]


def test_sex_and_life_stage_are_set_by_a_curator_and_audited(built):
    cat, ids, _ = built
    done = set_individual_traits(cat, SetTraitsRequest(ids["lone"], " Female", "adult", user="cora"))
    assert done.changed == {"sex": (None, "female"), "life_stage": (None, "adult")}
    assert "sex not recorded → female" in done.message and "audit trail" in done.message
    h = individual_history(cat, IndividualHistoryRequest(ids["lone"])).history
    assert (h.sex, h.life_stage) == ("female", "adult")
    rows = audit_rows(cat, action="individual.traits", target=f"individual#{ids['lone']}")
    assert len(rows) == 1 and rows[0].user == "cora"
    assert rows[0].details == {"sex": [None, "female"], "life_stage": [None, "adult"]}
    again = set_individual_traits(cat, SetTraitsRequest(ids["lone"], "female", None, user="cora"))
    assert not again.changed and again.message.startswith("Nothing changed")
    assert len(audit_rows(cat, action="individual.traits", target=f"individual#{ids['lone']}")) == 1
    cleared = set_individual_traits(cat, SetTraitsRequest(ids["lone"], None, "", user="cora"))
    assert cleared.changed == {"life_stage": ("adult", None)}
    assert individual_history(cat, IndividualHistoryRequest(ids["lone"])).history.life_stage is None


def test_a_viewer_cannot_set_them_and_nothing_changes(built):
    cat, ids, _ = built
    before = len(audit_rows(cat, action="individual.traits"))
    with pytest.raises(PermissionDenied, match="vera is a viewer; setting sex and life stage needs the curator"):
        set_individual_traits(cat, SetTraitsRequest(ids["baraka"], "male", "juvenile", user="vera"))
    h = individual_history(cat, IndividualHistoryRequest(ids["baraka"])).history
    assert (h.sex, h.life_stage) == (None, None)
    assert len(audit_rows(cat, action="individual.traits")) == before


def test_bad_requests_are_refused_naming_what_was_given(built):
    cat, ids, _ = built
    with pytest.raises(ValueError, match="sex must be one of female, male, unknown .* not 'hermaphrodite'"):
        SetTraitsRequest(ids["baraka"], "hermaphrodite", None, user="cora")
    with pytest.raises(ValueError, match="life stage must be one of adult, subadult, juvenile, unknown"):
        SetTraitsRequest(ids["baraka"], None, "teen", user="cora")
    with pytest.raises(ValueError, match="Choose a sex or a life stage"):
        SetTraitsRequest(ids["baraka"], None, None, user="cora")
    with pytest.raises(ValueError, match="Open an individual first"):
        IndividualHistoryRequest(None)
    with pytest.raises(ValueError, match="no individual with id 9999"):
        individual_history(cat, IndividualHistoryRequest(9999))
    with pytest.raises(ValueError, match="no individual with id 9999"):
        set_individual_traits(cat, SetTraitsRequest(9999, "male", None, user="cora"))


def test_rosette_individual_shows_the_page_and_sets_traits(built, capsys):
    cat, ids, data_dir = built
    base = ["--data-dir", str(data_dir), "--user", "cora"]
    assert cli(base + ["individual", "Amani", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert (page["sightings"], page["stations"], page["annotations"]) == (4, 3, 8)
    assert page["first_seen"]["time_from"] == "sighting date" and page["last_seen"]["time_from"] == "EXIF time"
    assert page["home_range"]["mcp_km2"] == pytest.approx(50.0, rel=0.005)
    assert [b["annotation_id"] for b in page["best_photos"]][:1] == [ids["a2"]]
    assert cli(base + ["individual", "Kito"]) == 0
    out = capsys.readouterr().out
    assert "Kito" in out and "Sex: not recorded" in out and "needs 3 stations" in out and "Waterhole A" in out
    assert cli(base + ["individual", "Kito", "--sex", "male", "--life-stage", "subadult"]) == 0
    assert "sex not recorded → male" in capsys.readouterr().out
    assert cli(base + ["individual", "Kito", "--json"]) == 0
    assert {k: v for k, v in json.loads(capsys.readouterr().out).items() if k in ("sex", "life_stage")} == \
        {"sex": "male", "life_stage": "subadult"}
    assert audit_rows(cat, action="individual.traits", target=f"individual#{ids['kito']}")[0].user == "cora"
    assert cli(base + ["individual", "Kito", "--sex", "tomcat"]) == 1
    assert "sex must be one of female, male, unknown" in capsys.readouterr().err
    assert cli(base + ["individual", "Nobody"]) == 1
    assert "no individual named 'Nobody'" in capsys.readouterr().err
    assert cli(["--data-dir", str(data_dir), "--user", "vera", "individual", "Kito", "--sex", "female"]) == 1
    assert "vera is a viewer" in capsys.readouterr().err


def test_deployments_of_a_station_named_only_by_location_name_are_one_station():
    """Two deployments of one station that has a locationName but no locationID are one place on the page, as
    they are one detector in the population study (core.field.stations.station_name)."""
    from db.field.individual_history import _station_of

    def photo_at(key: str, name: str | None, location_id: str | None = None) -> Photo:
        return Photo(deployment=Deployment(key=key, location_id=location_id, location_name=name, lat=-16.5,
                                           lon=-56.5, start="2024-05-01T00:00:00-04:00",
                                           end="2024-05-05T00:00:00-04:00"))

    first, second = _station_of(photo_at("D1", "Spring"), None, {}), _station_of(photo_at("D2", "Spring"), None, {})
    assert first[0] == second[0] == "location Spring" and first[1] == "Spring"
    assert _station_of(photo_at("D3", None), None, {})[0] == "location D3"  # nothing names the station: its own id
    assert _station_of(photo_at("D4", "Spring", "L9"), None, {})[:2] == ("location L9", "Spring")
