"""Camtrap DP 1.0 import (issue 23): deployments, media and observations become deployments, photos and one
annotation per animal observation; events keep their eventID; every bad input gets a message naming what it found
and loses nothing; importing the same package twice changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from app.cli import main as cli
from core.readers import FORMATS, IngestError, detect_format
from core.readers.camtrapdp import CamtrapDPError, is_camtrap_profile, read_camtrapdp
from db.io.ingest import ingest_path, ingest_uploads
from db.models import Deployment, Image, Individual, Photo, Sighting, Species
from db.session import open_catalogue
from jobs.requests.ingest import ImportPathRequest
from tests.camtrapdp_package import PROFILE, write_package, zip_package

START, END = "2024-05-01T00:00:00+02:00", "2024-05-10T00:00:00+02:00"
BOX_1 = [0.1, 0.2, 0.3, 0.4]
BOX_2 = [0.55, 0.1, 0.4, 0.5]
PERSON = [0.05, 0.05, 0.4, 0.9]


def deployments() -> list[dict]:
    return [{"deploymentID": "D1", "locationID": "L1", "locationName": "Pond", "latitude": 51.05, "longitude": 4.2,
             "deploymentStart": START, "deploymentEnd": END, "cameraID": "C1", "cameraModel": "Reconyx",
             "habitat": "wetland"},
            {"deploymentID": "D2", "locationID": "L2", "locationName": "Ridge", "latitude": 51.1, "longitude": 4.3,
             "deploymentStart": START, "deploymentEnd": END, "cameraID": "C2"}]


def media() -> list[dict]:
    return [
        # M1 + M2: event E1 (a media-level observation on M1 names it); M1 holds two foxes
        {"mediaID": "M1", "deploymentID": "D1", "timestamp": "2024-05-02T10:00:00+02:00", "filePath": "media/m1.jpg",
         "filePublic": "false", "fileMediatype": "image/jpeg", "favorite": "true"},
        {"mediaID": "M2", "deploymentID": "D1", "timestamp": "2024-05-02T10:00:04+02:00", "filePath": "media/m2.jpg",
         "filePublic": "false", "fileMediatype": "image/jpeg"},
        # M3: a person (blurred) and a badger with a box
        {"mediaID": "M3", "deploymentID": "D2", "timestamp": "2024-05-03T22:15:00+02:00", "filePath": "media/m3.jpg",
         "filePublic": "false", "fileMediatype": "image/jpeg"},
        # M4: blank
        {"mediaID": "M4", "deploymentID": "D2", "timestamp": "2024-05-04T08:00:00+02:00", "filePath": "media/m4.jpg",
         "filePublic": "false", "fileMediatype": "image/jpeg"},
        # M5: nobody has classified it yet
        {"mediaID": "M5", "deploymentID": "D2", "timestamp": "2024-05-05T08:00:00+02:00", "filePath": "media/m5.jpg",
         "filePublic": "false", "fileMediatype": "image/jpeg"},
    ]


def _box(values: list[float]) -> dict:
    return dict(zip(("bboxX", "bboxY", "bboxWidth", "bboxHeight"), values))


def observations() -> list[dict]:
    return [
        {"observationID": "O1", "deploymentID": "D1", "mediaID": "M1", "eventID": "E1", "observationLevel": "media",
         "observationType": "animal", "scientificName": "Vulpes vulpes", "count": 1, "lifeStage": "adult",
         "sex": "female", "individualID": "Vixen", "behavior": "walking", "classificationMethod": "human",
         **_box(BOX_1)},
        {"observationID": "O2", "deploymentID": "D1", "mediaID": "M1", "eventID": "E1", "observationLevel": "media",
         "observationType": "animal", "scientificName": "Vulpes vulpes", "count": 1, "lifeStage": "juvenile",
         **_box(BOX_2)},
        # event-level: the two foxes of E1 counted at event level; M2 has no observation of its own, so it gets
        # this one; M1 has its own (O1, O2), so there it is the same animals again and is kept, not annotated
        {"observationID": "O3", "deploymentID": "D1", "eventID": "E1", "eventStart": "2024-05-02T10:00:00+02:00",
         "eventEnd": "2024-05-02T10:00:04+02:00", "observationLevel": "event", "observationType": "animal",
         "scientificName": "Vulpes vulpes", "count": 2},
        {"observationID": "O4", "deploymentID": "D2", "mediaID": "M3", "observationLevel": "media",
         "observationType": "human", **_box(PERSON)},
        {"observationID": "O5", "deploymentID": "D2", "mediaID": "M3", "observationLevel": "media",
         "observationType": "animal", "scientificName": "Meles meles", "individualID": "Brock", "sex": "male",
         **_box([0.5, 0.5, 0.45, 0.45])},
        {"observationID": "O6", "deploymentID": "D2", "mediaID": "M4", "observationLevel": "media",
         "observationType": "blank"},
        {"observationID": "O7", "deploymentID": "D2", "mediaID": "M5", "observationLevel": "media",
         "observationType": "unclassified"},
    ]


def package(tmp_path: Path, *, deps=None, med=None, obs=None, **kw) -> Path:
    return write_package(tmp_path / "pkg", deployments() if deps is None else deps, media() if med is None else med,
                         observations() if obs is None else obs, **kw)


def _items(report) -> dict[str, object]:
    return {it.name: it for it in report.items}


def _errors(report) -> list[str]:
    return [it.message for it in report.items if it.status == "error"]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """The package imported once into a fresh catalogue (built once for the module)."""
    root = tmp_path_factory.mktemp("camtrapdp")
    path = package(root)
    cat = open_catalogue(root / "data")
    report = ingest_path(cat, path, format="camtrap-dp", user="ana")
    return cat, report, path


# --------------------------------------------------------------------------- the reader (pure)


def test_format_is_registered_and_detected(tmp_path):
    path = package(tmp_path)
    assert "camtrap-dp" in FORMATS
    assert detect_format(path) == "camtrap-dp" and detect_format(path.parent) == "camtrap-dp"
    assert detect_format(zip_package(path.parent, tmp_path / "pkg.zip", wrapper="wrapped")) == "camtrap-dp"
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.jpg").write_bytes((path.parent / "media" / "m1.jpg").read_bytes())
    assert detect_format(tmp_path / "plain") == "folder"
    assert is_camtrap_profile(PROFILE) and is_camtrap_profile(PROFILE.replace("/1.0/", "/1.0.2/"))
    assert not is_camtrap_profile(PROFILE.replace("/1.0/", "/0.1.7/"))
    assert not is_camtrap_profile("tabular-data-package")


def test_reader_turns_rows_into_entries_deployments_and_observations(tmp_path):
    pkg = read_camtrapdp(package(tmp_path))
    try:
        assert [d.key for d in pkg.deployments] == ["D1", "D2"]
        assert pkg.deployments[0].details == {"habitat": "wetland"} and pkg.deployments[0].camera_id == "C1"
        by_name = {e.name: e for e in pkg.entries}
        assert list(by_name) == [f"media/m{i}.jpg" for i in range(1, 6)]
        m1, m2 = by_name["media/m1.jpg"], by_name["media/m2.jpg"]
        assert (m1.deployment, m1.taken_at, m1.media_key) == ("D1", "2024-05-02T10:00:00+02:00", "M1")
        assert {k: v for k, v in m1.media_details.items() if k != "observations"} == \
            {"filePublic": "false", "fileMediatype": "image/jpeg", "favorite": "true"}
        assert m1.sighting["key"] == "camtrap-dp:E1" and m1.sighting["event_key"] == "E1"
        assert m2.sighting == m1.sighting  # M2 joins E1 through the event-level observation's time window
        assert m1.sighting["place"] == "Pond" and m1.sighting["lat"] == 51.05 and m1.sighting["camera"] == "C1"
        assert m1.sighting["date"] == "2024-05-02T10:00:00+02:00"  # the event's first media
        assert m1.species == "Vulpes vulpes" and m1.read() == (tmp_path / "pkg" / "media" / "m1.jpg").read_bytes()
        facts = pkg.observations["media/m1.jpg"]
        assert [o.key for o in facts.animals] == ["O1", "O2"] and [o.key for o in facts.others] == ["O3@M1"]
        o1, o2 = facts.animals
        (o3,) = pkg.observations["media/m2.jpg"].animals
        assert o1.box.as_list() == BOX_1 and o2.box.as_list() == BOX_2 and o3.box is None
        assert (o1.individual, o1.life_stage, o1.sex, o2.life_stage) == ("Vixen", "adult", "female", "juvenile")
        assert o1.details == {"deploymentID": "D1", "eventID": "E1", "observationLevel": "media",
                              "observationType": "animal", "count": "1", "behavior": "walking",
                              "classificationMethod": "human"}
        assert o3.level == "event" and o3.details["observationID"] == "O3" and o3.details["count"] == "2"
        assert [o.key for o in pkg.observations["media/m2.jpg"].animals] == ["O3@M2"]
        m3 = pkg.observations["media/m3.jpg"]
        assert [b.as_list() for b in m3.people] == [PERSON] and [o.key for o in m3.animals] == ["O5"]
        assert by_name["media/m3.jpg"].media_details["observations"][0]["observationType"] == "human"
        assert by_name["media/m3.jpg"].sighting is None  # no eventID: the 60 s rule groups it
        assert pkg.observations["media/m4.jpg"].is_empty and not pkg.observations["media/m5.jpg"].is_empty
        # the rows' only problem: Camtrap DP 1.0.2 wants eventStart and eventEnd on every observation
        assert [p.message for p in pkg.problems if "schema check" not in p.message] == []
        assert all("field event" in p.message for p in pkg.problems)
    finally:
        pkg.tree.close()


def test_an_event_level_observation_without_event_id_applies_to_the_media_in_its_window(tmp_path):
    obs = observations() + [
        {"observationID": "O11", "deploymentID": "D2", "observationLevel": "event", "observationType": "animal",
         "eventStart": "2024-05-03T22:14:00+02:00", "eventEnd": "2024-05-04T08:00:00+02:00",
         "scientificName": "Meles meles"},
        {"observationID": "O12", "deploymentID": "D1", "observationLevel": "event", "observationType": "animal",
         "eventStart": "2024-05-03T22:14:00+02:00", "eventEnd": "2024-05-04T08:00:00+02:00"}]
    pkg = read_camtrapdp(package(tmp_path, obs=obs))
    try:
        # D2's M3 (22:15) and M4 (08:00, the window's last second) lie in O11's window; D1 has no media then
        # M3 has its own media-level badger (O5): the event's badger is the same animal, kept but not annotated twice
        assert [o.key for o in pkg.observations["media/m3.jpg"].animals] == ["O5"]
        assert "O11@M3" in [o.key for o in pkg.observations["media/m3.jpg"].others]
        assert [o.key for o in pkg.observations["media/m4.jpg"].animals] == ["O11@M4"]
        assert not pkg.observations["media/m4.jpg"].is_empty and pkg.observations["media/m5.jpg"].animals == ()
        assert {e.name: e.sighting for e in pkg.entries}["media/m3.jpg"] is None  # no eventID: no event named
        (problem,) = [p for p in pkg.problems if "schema check" not in p.message]
        assert "O12 (event 'without eventID')" in problem.message
    finally:
        pkg.tree.close()


def test_boxes_rounded_past_the_edge_are_clipped_and_unusable_ones_said(tmp_path):
    obs = observations()
    obs[0].update(_box([0.6, -0.0004, 0.4004, 0.5]))  # 4 decimals of rounding past the left-top / right edges
    obs[1].update(_box([0.5, 0.5, 0.7, 0.2]))  # far past the right edge
    obs[4]["observationType"] = ""  # not stated: it may be an animal, so M3 is not an empty frame
    obs.append({"observationID": "O13", "deploymentID": "D1", "mediaID": "M1", "observationLevel": "sequence",
                "observationType": "animal"})
    pkg = read_camtrapdp(package(tmp_path, obs=obs))
    try:
        o1, o2 = pkg.observations["media/m1.jpg"].animals
        assert o1.box.as_list() == [0.6, 0.0, 0.4, 0.4996]
        assert o2.box is None and o2.details["bboxWidth"] == "0.7"
        warning = {e.name: e.warning for e in pkg.entries}["media/m1.jpg"]
        assert "observation 'O2': box ['0.5', '0.5', '0.7', '0.2'] cannot be used" in warning
        m3 = pkg.observations["media/m3.jpg"]
        assert m3.animals == () and m3.others[1].type == "unclassified" and not m3.is_empty
        level, box = [p for p in pkg.problems if "schema check" not in p.message]
        assert level.message == ("1 observation(s) have an observationLevel other than 'media' or 'event', "
                                 "not imported: O13 ('sequence')")
        assert box.name == "media/m1.jpg" and box.status == "error" and "observation 'O2' (observations row 3)" \
            in box.message and "cannot be used" in box.message
    finally:
        pkg.tree.close()


# --------------------------------------------------------------------------- the import


def test_each_animal_observation_becomes_its_own_annotation(imported):
    cat, report, _ = imported
    items = _items(report)
    assert items["media/m1.jpg"].status == "imported" and len(items["media/m1.jpg"].annotation_ids) == 2
    with cat.unit_of_work() as s:
        m1 = s.scalar(select(Photo).where(Photo.media_key == "M1"))
        m2 = s.scalar(select(Photo).where(Photo.media_key == "M2"))
        anns = {a.observation_key: a for a in m1.annotations}
        assert set(anns) == {"O1", "O2"}  # the event-level O3 describes these two foxes again: not a third animal
        assert m1.media_details["observations"][0]["observationID"] == "O3"  # kept, for the export
        o1, o2 = anns["O1"], anns["O2"]
        (o3,) = m2.annotations
        assert (o1.box.as_list(), o1.box_source) == (BOX_1, "camtrap-dp")
        assert (o2.box.as_list(), o2.box_source) == (BOX_2, "camtrap-dp")
        assert (o3.box.is_whole, o3.box_source) == (True, "whole-photo")
        assert o1.thumb_path != o2.thumb_path != m1.thumb_path and o3.thumb_path == m2.thumb_path
        assert (o1.life_stage, o1.sex, o2.life_stage, o2.sex) == ("adult", "female", "juvenile", None)
        assert o1.observation_details["behavior"] == "walking" and o3.observation_details["observationLevel"] == "event"
        fox = s.scalar(select(Species).where(Species.name == "Vulpes vulpes"))
        assert {a.species_id for a in m1.annotations} == {fox.id}
        vixen = s.scalar(select(Individual).where(Individual.name == "Vixen"))
        assert o1.individual_id == vixen.id and vixen.species_id == fox.id
        assert (vixen.sex, vixen.life_stage) == ("female", "adult")  # taken from the observation: it had none
        assert o2.individual_id is None and o3.individual_id is None  # unnamed: they enter the review queue
        assert [a.observation_key for a in m2.annotations] == ["O3@M2"]


def test_media_rows_keep_their_deployment_time_event_and_fields(imported):
    cat, report, _ = imported
    with cat.unit_of_work() as s:
        deps = {d.key: d for d in s.scalars(select(Deployment))}
        assert set(deps) == {"D1", "D2"} and deps["D1"].details == {"habitat": "wetland"}
        assert deps["D1"].start == START and deps["D1"].camera_model == "Reconyx"
        m1 = s.scalar(select(Photo).where(Photo.media_key == "M1"))
        m2 = s.scalar(select(Photo).where(Photo.media_key == "M2"))
        assert m1.deployment.key == "D1" and m1.taken_at == "2024-05-02T10:00:00+02:00"
        assert {k: v for k, v in m1.media_details.items() if k != "observations"} == \
            {"filePublic": "false", "fileMediatype": "image/jpeg", "favorite": "true"}
        assert m1.sighting_id == m2.sighting_id is not None
        event = s.get(Sighting, m1.sighting_id)
        assert (event.key, event.event_key, event.deployment_id) == ("camtrap-dp:E1", "E1", deps["D1"].id)
        assert {a.sighting_id for a in m1.annotations} == {event.id}


def test_people_are_blurred_blank_media_are_empty_and_unclassified_come_in_for_review(imported):
    cat, report, _ = imported
    items = _items(report)
    assert items["media/m4.jpg"].status == "empty" and "--keep-empty" in items["media/m4.jpg"].message
    assert items["media/m5.jpg"].status == "imported" and "for review" in items["media/m5.jpg"].message
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id)).where(Photo.media_key == "M4")) == 0
        m3 = s.scalar(select(Photo).where(Photo.media_key == "M3"))
        assert m3.people == [[*PERSON, 1.0]]
        assert m3.media_details["observations"][0]["bboxX"] == "0.05"  # the human observation, as it came
        (badger,) = m3.annotations
        assert badger.observation_key == "O5" and badger.individual.name == "Brock"
        thumb = np.asarray(PILImage.open(cat.blobs.path(m3.thumb_path)).convert("L"), dtype=float)
        m5 = s.scalar(select(Photo).where(Photo.media_key == "M5"))
        (whole,) = m5.annotations
        assert whole.box.is_whole and whole.observation_key is None and whole.individual_id is None
        assert m5.media_details["observations"][0]["observationType"] == "unclassified"
    h, w = thumb.shape
    inside = thumb[int(0.2 * h):int(0.8 * h), int(0.1 * w):int(0.4 * w)]
    outside = thumb[int(0.1 * h):int(0.4 * h), int(0.6 * w):int(0.95 * w)]
    assert inside.std() < 0.5 * outside.std()  # the random-noise frame is smoothed where the person stands


def test_importing_the_same_package_twice_adds_nothing(imported):
    cat, _, path = imported
    with cat.unit_of_work() as s:
        before = (s.scalar(select(func.count(Image.id))), s.scalar(select(func.count(Photo.id))),
                  s.scalar(select(func.count(Sighting.id))), s.scalar(select(func.count(Deployment.id))))
    again = ingest_path(cat, path, user="ana")
    statuses = {it.name: it.status for it in again.items}
    assert statuses["media/m1.jpg"] == statuses["media/m3.jpg"] == "duplicate"
    assert statuses["deployments"] == "duplicate" and not _errors(again)
    with cat.unit_of_work() as s:
        after = (s.scalar(select(func.count(Image.id))), s.scalar(select(func.count(Photo.id))),
                 s.scalar(select(func.count(Sighting.id))), s.scalar(select(func.count(Deployment.id))))
    assert after == before == (5, 4, 3, 2)  # m1 2, m2 1, m3 1, m5 1; events E1 and the 60-s events of m3, m5


def test_keep_empty_imports_blank_media_without_annotations(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path), user="ana", keep_empty=True)
    assert _items(report)["media/m4.jpg"].status == "imported"
    with cat.unit_of_work() as s:
        blank = s.scalar(select(Photo).where(Photo.media_key == "M4"))
        assert blank.annotations == [] and blank.media_details["observations"][0]["observationType"] == "blank"


def test_a_photo_imported_before_takes_its_observations_once(tmp_path):
    """The media imported as a plain folder first: the package's observations fill the photo (the undecided
    whole-photo annotation becomes the first observation, same id), and a third import adds nothing."""
    path = package(tmp_path)
    cat = open_catalogue(tmp_path / "data")
    first = ingest_path(cat, path.parent / "media", user="ana")
    (plain_id,) = _items(first)["m1.jpg"].annotation_ids
    report = ingest_path(cat, path, user="ana")
    item = _items(report)["media/m1.jpg"]
    assert item.status == "updated" and "added 2 observation(s)" in item.message
    with cat.unit_of_work() as s:
        m1 = s.scalar(select(Photo).where(Photo.original_name == "m1.jpg"))
        assert m1.media_key == "M1" and sorted(a.observation_key for a in m1.annotations) == ["O1", "O2"]
        assert s.get(Image, plain_id).observation_key == "O1"
        # the package places the photos catalogued before at their stations: deployment, time, event
        assert m1.deployment.key == "D1" and m1.taken_at == "2024-05-02T10:00:00+02:00"
        assert m1.sighting.event_key == "E1" and {a.sighting_id for a in m1.annotations} == {m1.sighting_id}
        m3 = s.scalar(select(Photo).where(Photo.original_name == "m3.jpg"))
        assert m3.deployment.key == "D2" and m3.sighting is not None and m3.sighting.deployment_id == m3.deployment_id
    assert "linked to deployment D1" in item.message
    again = ingest_path(cat, path, user="ana")
    assert _items(again)["media/m1.jpg"].status == "duplicate"
    assert "linked" not in _items(again)["media/m1.jpg"].message  # linked once


def test_a_manifest_places_photos_catalogued_before_at_their_station(tmp_path):
    """Photos imported before the stations were known: a manifest naming their deployment links them (time from
    the manifest, events formed), reported as updated; a dry run says so and writes nothing."""
    from core.field.stations import deployment_spec
    from db.records.deployments import store_deployments

    path = package(tmp_path)
    cat = open_catalogue(tmp_path / "data")
    ingest_path(cat, path.parent / "media", user="ana")
    store_deployments(cat, [deployment_spec(d) for d in deployments()], user="ana")
    manifest = path.parent / "media" / "stations.csv"
    manifest.write_text("filename,identity,deployment,timestamp\nm1.jpg,,D1,2024-05-02T10:00:00+02:00\n"
                        "m2.jpg,,D1,2024-05-02T10:00:04+02:00\n")
    dry = ingest_path(cat, manifest, user="ana", dry_run=True)
    assert "would be linked to deployment D1" in _items(dry)["m1.jpg"].message
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id)).where(Photo.deployment_id.is_not(None))) == 0
    report = ingest_path(cat, manifest, user="ana")
    assert _items(report)["m1.jpg"].status == "updated" and "linked to deployment D1" in _items(report)["m1.jpg"].message
    with cat.unit_of_work() as s:
        m1, m2 = (s.scalar(select(Photo).where(Photo.original_name == n)) for n in ("m1.jpg", "m2.jpg"))
        assert (m1.deployment.key, m2.deployment.key) == ("D1", "D1") and m2.taken_at == "2024-05-02T10:00:04+02:00"
        assert m1.sighting_id is not None and m1.sighting_id == m2.sighting_id  # 4 s apart: one event


def test_zip_import_reads_the_package_inside(tmp_path):
    path = package(tmp_path)
    archive = zip_package(path.parent, tmp_path / "pkg.zip", wrapper="survey-2024")
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, archive, user="ana")
    assert report.format == "camtrap-dp" and report.counts["imported"] == 4  # 4 media (the deployments line is
    # about the package, not one of its media)
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Image.id)).where(Image.observation_key.is_not(None))) == 4


def test_cli_imports_a_package(tmp_path, capsys):
    path = package(tmp_path)
    d = str(tmp_path / "cli-data")
    assert cli(["--data-dir", d, "--user", "ana", "import", str(path.parent), "--format", "camtrap-dp"]) == 0
    out = capsys.readouterr().out
    assert "as camtrap-dp" in out and "media/m1.jpg" in out


# --------------------------------------------------------------------------- bad input


def test_timestamp_without_time_zone_takes_the_deployments_and_says_so(tmp_path):
    med = media()
    med[0]["timestamp"] = "2024-05-02T10:00:00"
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, med=med), user="ana")
    item = _items(report)["media/m1.jpg"]
    assert item.status == "imported" and "no time zone" in item.message and "'D1'" in item.message
    with cat.unit_of_work() as s:
        m1 = s.scalar(select(Photo).where(Photo.media_key == "M1"))
        assert m1.taken_at == "2024-05-02T10:00:00+02:00" and m1.deployment.key == "D1"
        assert m1.media_details["timestamp"] == "2024-05-02T10:00:00"  # the value as it came


def test_media_outside_their_deployment_come_in_unlinked(tmp_path):
    med = media()
    med[2]["timestamp"] = "2024-06-03T22:15:00+02:00"
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, med=med), user="ana")
    item = _items(report)["media/m3.jpg"]
    assert item.status == "imported" and "outside deployment 'D2'" in item.message
    with cat.unit_of_work() as s:
        m3 = s.scalar(select(Photo).where(Photo.media_key == "M3"))
        assert m3.deployment_id is None and m3.taken_at == "2024-06-03T22:15:00+02:00"
        assert m3.media_details["deploymentID"] == "D2" and len(m3.annotations) == 1


@pytest.mark.parametrize("table,column,dupe", [("deployments", "deploymentID", "D1"), ("media", "mediaID", "M2"),
                                               ("observations", "observationID", "O2")])
def test_duplicate_ids_refuse_the_package_naming_them(tmp_path, table, column, dupe):
    rows = {"deployments": deployments(), "media": media(), "observations": observations()}
    copy = dict(rows[table][1])
    copy[column] = dupe
    if table == "media":
        copy["filePath"] = "media/other.jpg"
    rows[table].append(copy)
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, deps=rows["deployments"], med=rows["media"],
                                      obs=rows["observations"]), user="ana")
    (msg,) = _errors(report)
    assert f"duplicate {column}s in {table}" in msg and repr(dupe) in msg and "nothing was imported" in msg
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id))) == 0 and s.scalar(select(func.count(Deployment.id))) == 0


def test_observations_of_missing_media_are_named_and_the_rest_imports(tmp_path):
    obs = observations() + [
        {"observationID": "O8", "deploymentID": "D1", "mediaID": "M404", "observationLevel": "media",
         "observationType": "animal", "scientificName": "Vulpes vulpes"},
        {"observationID": "O9", "deploymentID": "D1", "mediaID": "M405", "observationLevel": "media",
         "observationType": "animal"}]
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, obs=obs), user="ana")
    (msg,) = _errors(report)
    assert msg.startswith("2 observation(s) point to media") and "O8 (mediaID 'M404')" in msg and "O9" in msg
    assert report.counts["imported"] == 4


def test_media_given_only_as_urls_are_refused_with_what_to_do(tmp_path):
    med = media() + [{"mediaID": f"U{i}", "deploymentID": "D1", "timestamp": "2024-05-02T11:00:00+02:00",
                      "filePath": f"https://example.org/media/u{i}.jpg"} for i in range(3)]
    obs = observations() + [{"observationID": "OU", "deploymentID": "D1", "mediaID": "U0",
                             "observationLevel": "media", "observationType": "animal"}]
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, med=med, obs=obs), user="ana")
    (msg,) = _errors(report)
    assert msg.startswith("3 media are given only as URLs") and "'U0'" in msg
    assert "download them next to datapackage.json" in msg.lower() and "relative" in msg
    assert report.counts["imported"] == 4
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id)).where(Photo.media_key.like("U%"))) == 0


def test_an_individual_of_another_species_is_refused_naming_both(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    gallery = tmp_path / "gallery"
    gallery.mkdir()
    PILImage.new("RGB", (40, 30), (10, 200, 30)).save(gallery / "g.jpg")
    (gallery / "manifest.csv").write_text("filename,identity,species\ng.jpg,Vixen,Meles meles\n")
    assert ingest_path(cat, gallery / "manifest.csv", user="ana").counts["imported"] == 1
    report = ingest_path(cat, package(tmp_path), user="ana")
    item = _items(report)["media/m1.jpg"]
    assert item.status == "error"
    assert "'Vixen' is catalogued as 'Meles meles'" in item.message and "'Vulpes vulpes'" in item.message
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id)).where(Photo.media_key == "M1")) == 0  # nothing half-stored
        assert s.scalar(select(func.count(Photo.id)).where(Photo.media_key == "M2")) == 1  # the rest came in


@pytest.mark.parametrize("profile,found", [
    (None, "no 'profile'"),
    ("tabular-data-package", "profile 'tabular-data-package'"),
    ("https://raw.githubusercontent.com/tdwg/camtrap-dp/0.1.7/camtrap-dp-profile.json", "0.1.7"),
])
def test_a_package_that_is_not_camtrap_dp_1_is_refused(tmp_path, profile, found):
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, profile=profile), format="camtrap-dp", user="ana")
    (msg,) = _errors(report)
    assert found in msg and "Camtrap DP 1.x" in msg and "camtrap-dp/1.0/camtrap-dp-profile.json" in msg
    assert report.counts["imported"] == 0


def test_missing_resources_and_columns_are_named(tmp_path):
    path = package(tmp_path)
    descriptor = json.loads(path.read_text())
    descriptor["resources"] = [r for r in descriptor["resources"] if r["name"] != "observations"]
    path.write_text(json.dumps(descriptor))
    with pytest.raises(CamtrapDPError, match=r"no 'observations' resource \(found: deployments, media\)"):
        read_camtrapdp(path)
    path = package(tmp_path)
    text = (path.parent / "media.csv").read_text().replace("timestamp", "time", 1)
    (path.parent / "media.csv").write_text(text)
    cat = open_catalogue(tmp_path / "data")
    (msg,) = _errors(ingest_path(cat, path, user="ana"))
    assert "media.csv (media) lacks the column timestamp" in msg and "found: mediaID" in msg


def test_a_missing_media_file_is_named_and_the_rest_imports(tmp_path):
    path = package(tmp_path)
    (path.parent / "media" / "m2.jpg").unlink()
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, path, user="ana")
    item = _items(report)["media/m2.jpg"]
    assert item.status == "error" and "'M2'" in item.message and "not in the package" in item.message
    assert _items(report)["media/m1.jpg"].status == "imported"


def test_keep_empty_is_for_packages_and_detections_only(tmp_path):
    assert ImportPathRequest("pkg", user="ana", format="camtrap-dp", keep_empty=True).keep_empty
    with pytest.raises(ValueError, match="--keep-empty.*Camtrap DP package"):
        ImportPathRequest("photos", user="ana", format="folder", keep_empty=True)
    path = package(tmp_path)
    cat = open_catalogue(tmp_path / "data")
    with pytest.raises(IngestError, match="read as folder, where no frame is empty"):
        ingest_path(cat, path.parent / "media", user="ana", keep_empty=True)


def test_odd_observation_cells_are_kept_and_said(tmp_path):
    """A half-given box comes in as the whole photo (its cells kept), a lifeStage outside the vocabulary is kept
    in the details, an event-level observation of no media and media of an unknown deployment are named."""
    obs = observations()
    obs[1].update(bboxWidth="", lifeStage="baby")
    obs.append({"observationID": "O10", "deploymentID": "D2", "eventID": "E-none", "observationLevel": "event",
                "eventStart": "2024-05-08T00:00:00+02:00", "eventEnd": "2024-05-08T00:01:00+02:00",
                "observationType": "animal"})
    med = media()
    med[4]["deploymentID"] = "D9"
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, obs=obs, med=med), user="ana")
    m1 = _items(report)["media/m1.jpg"]
    assert "observation 'O2': only some of bboxX" in m1.message and "lifeStage 'baby'" in m1.message
    msg, box = _errors(report)
    assert box.startswith("media 'M1': observation 'O2' (observations row 3): only some of bboxX")
    assert msg.startswith("1 event-level observation(s) match no media") and "O10 (event 'E-none')" in msg
    m5 = _items(report)["media/m5.jpg"]
    assert m5.status == "imported" and "deploymentID 'D9' is not among the package's deployments" in m5.message
    with cat.unit_of_work() as s:
        o2 = s.scalar(select(Image).where(Image.observation_key == "O2"))
        assert o2.box.is_whole and o2.life_stage is None
        assert o2.observation_details["lifeStage"] == "baby" and o2.observation_details["bboxX"] == "0.55"
        photo5 = s.scalar(select(Photo).where(Photo.media_key == "M5"))
        assert photo5.deployment_id is None and photo5.media_details["deploymentID"] == "D9"


def test_a_deployment_stored_differently_is_kept_and_named(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    first = tmp_path / "first"
    write_package(first, deployments(), media()[:1], observations()[:1])
    ingest_path(cat, first / "datapackage.json", user="ana")
    deps = deployments()
    deps[0]["cameraID"] = "C1-replaced"
    report = ingest_path(cat, package(tmp_path, deps=deps), user="ana")
    (msg,) = _errors(report)
    assert "deployment 'D1' is already stored differently" in msg and "'C1-replaced'" in msg
    with cat.unit_of_work() as s:
        assert s.scalar(select(Deployment.camera_id).where(Deployment.key == "D1")) == "C1"
        assert s.scalar(select(Photo).where(Photo.media_key == "M2")).deployment.key == "D1"


def test_dry_run_writes_nothing(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path), user="ana", dry_run=True)
    statuses = {it.name: it.status for it in report.items}
    assert statuses["deployments"] == statuses["media/m1.jpg"] == "would-import"
    assert statuses["media/m4.jpg"] == "empty"
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id))) == 0 and s.scalar(select(func.count(Deployment.id))) == 0
        assert s.scalar(select(func.count(Individual.id))) == 0


def test_a_package_read_as_a_plain_zip_is_refused_not_stripped(tmp_path):
    """Forced to --format zip, a package would lose its observations: it is refused, naming how to import it."""
    archive = zip_package(package(tmp_path).parent, tmp_path / "pkg.zip")
    cat = open_catalogue(tmp_path / "data")
    (item,) = ingest_path(cat, archive, format="zip", user="ana").items
    assert item.status == "error" and "Camtrap DP package" in item.message and "--format camtrap-dp" in item.message
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id))) == 0


def test_a_package_uploaded_on_its_own_comes_in_as_a_package(tmp_path):
    """The Ingest tab's upload of a package zip imports it as `rosette import` does (deployments, one annotation
    per animal observation, individuals), blank media kept with "keep empty frames"; beside another photo or a
    manifest it is refused, naming what it was uploaded with, and nothing comes in."""
    from jobs.actions.ingest import import_uploads
    from jobs.requests.ingest import ImportUploadsRequest

    (tmp_path / "upload").mkdir()
    archive = zip_package(package(tmp_path).parent, tmp_path / "upload" / "survey.zip", wrapper="survey-2024")
    photo = tmp_path / "upload" / "extra.jpg"
    photo.write_bytes((tmp_path / "pkg" / "media" / "m1.jpg").read_bytes())
    manifest = tmp_path / "upload" / "manifest.csv"
    manifest.write_text("filename,identity\nm1.jpg,Vixen\n")
    cat = open_catalogue(tmp_path / "data")
    for files, kw, words in (([archive, photo], {}, "other files (extra.jpg)"),
                             ([archive], {"manifest": manifest}, "a manifest")):
        (item,) = ingest_uploads(cat, files, user="ana", **kw).items
        assert item.status == "error" and "survey.zip is a Camtrap DP package" in item.message and words in item.message
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id))) == 0 and s.scalar(select(func.count(Deployment.id))) == 0
    outcome = import_uploads(cat, ImportUploadsRequest((str(archive),), user="ana", keep_empty=True))
    assert outcome.counts["imported"] == 5, outcome.rows  # 5 media, blank M4 kept (not the deployments line)
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Deployment.id))) == 2
        assert s.scalar(select(func.count(Image.id)).where(Image.observation_key.is_not(None))) == 4
        assert set(s.scalars(select(Individual.name))) >= {"Vixen"}
    with pytest.raises(ValueError, match="keeping empty frames"):
        ImportUploadsRequest((str(photo),), user="ana", keep_empty=True)