"""The Camtrap DP 1.0 export: rows from the catalogue's decisions, the package valid against the shipped TDWG
schemas (checked offline: every socket connection fails while it runs), a broken package failing with named
errors, and bad requests refused in plain words."""

from __future__ import annotations

import csv
import io
import json
import shutil
import socket
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from app.cli import main as cli_main
from core.field.camtrapdp_writer import (
    CAMTRAP_DP_VERSION,
    PROFILE_URL,
    SCHEMA_DIR,
    SCHEMA_URLS,
    CamtrapDPError,
    PackageMetadata,
    table_fields,
    timestamp,
    validate_package,
    write_package,
    write_table,
)
from db.field import camtrapdp_export as exporter
from db import catalogue as ops
from db.field.camtrapdp_export import fallback_id, media_path
from db.catalogue import CatalogueError, current_individual
from db.io.ingest import ingest_path
from db.identify.matching import record_decision
from db.models import Deployment, Image, Individual, Photo, Sighting
from db.session import open_catalogue
from jobs.actions.camtrapdp import export_camtrap_dp
from jobs.requests.camtrapdp import ExportCamtrapDPRequest


class NetworkUsed(AssertionError):
    pass


@pytest.fixture()
def offline(monkeypatch):
    """Any attempt to open a connection fails the test: validation must never fetch a schema."""

    def refuse(*args, **kwargs):
        raise NetworkUsed(f"a connection was attempted: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def _jpeg(path: Path, seed: int) -> None:
    arr = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    PILImage.fromarray(arr).save(path, format="JPEG", quality=90)


def _rows(folder: Path, name: str) -> list[dict[str, str]]:
    with open(folder / f"{name}.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def build_catalogue(root: Path) -> SimpleNamespace:
    """A catalogue made through the import and the curators' services under ``root``, exported once as Camtrap DP
    into ``root / "package"`` (also the round trip's start).

    p1, p2 (manifest: Ayla), p4 (manifest: Bram), p3, p5, p6, p7 (no identity), imported by "importer".
    p3: carla decides "same individual" as p1. p4's Bram: merged into Ayla by dora. p2: erin splits it off into
    a new individual, then undoes that (the import's assignment stands again). p5: a MegaDetector box, no
    individual, and a person box. p6: no deployment; p7: a deployment without coordinates (both left out). p8: an
    empty frame (no annotation).
    """
    photos = root / "photos"
    photos.mkdir()
    names = [f"p{i}.jpg" for i in range(1, 9)]
    for i, n in enumerate(names):
        _jpeg(photos / n, seed=i)
    identities = {"p1.jpg": "Ayla", "p2.jpg": "Ayla", "p4.jpg": "Bram"}
    with open(photos / "manifest.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["filename", "identity", "species"])
        w.writerows([[n, identities.get(n, ""), "Tragelaphus angasii"] for n in names])
    cat = open_catalogue(root / "data")
    report = ingest_path(cat, photos / "manifest.csv", user="importer")
    assert report.counts["imported"] == 8, [(i.name, i.status, i.message) for i in report.items]
    with cat.unit_of_work() as s:
        photo = {p.original_name: p for p in s.scalars(select(Photo))}
        ann = {n: photo[n].annotations[0].id for n in names}
        d1 = Deployment(key="cam A/2024", location_id="loc-A", location_name="Waterhole", lat=-27.5, lon=32.25,
                        start="2024-05-01T08:00:00-04:00", end="2024-05-20T18:30:00-04:00", camera_id="C7",
                        camera_model="Reconyx HF2",
                        details={"cameraHeight": "0.8", "habitat": "thicket", "notACamtrapField": "dropped"})
        d2 = Deployment(key="cam B", location_name="Ridge", start="2024-05-01T08:00:00+00:00",
                        end="2024-05-02T08:00:00+00:00")
        s.add_all([d1, d2])
        s.flush()
        event = Sighting(key="camtrap-dp:e1", event_key="e1", deployment_id=d1.id)
        s.add(event)
        s.flush()
        for k, n in enumerate(names[:5]):
            photo[n].deployment_id = d1.id
            photo[n].taken_at = f"2024-05-0{2 + k}T06:15:30.250000-04:00"
        photo["p8.jpg"].deployment_id = d1.id
        photo["p8.jpg"].taken_at = "2024-05-06T07:00:00-04:00"
        s.delete(photo["p8.jpg"].annotations[0])  # an empty frame: a photo without annotations
        photo["p7.jpg"].deployment_id = d2.id
        photo["p7.jpg"].taken_at = "2024-05-01T10:00:00+00:00"
        photo["p1.jpg"].media_key = "m-001"
        photo["p1.jpg"].media_details = {"captureMethod": "timeLapse", "favorite": True, "mediaComments": "dusk",
                                         "notACamtrapField": 3}
        photo["p1.jpg"].sighting_id = event.id
        a1 = s.get(Image, ann["p1.jpg"])
        a1.observation_key, a1.observation_details = "obs-1", {"behavior": "grazing", "count": 1.0}
        a1.sighting_id = event.id
        a5 = s.get(Image, ann["p5.jpg"])
        a5.bbox_x, a5.bbox_y, a5.bbox_w, a5.bbox_h = 0.1, 0.2, 0.3, 0.4
        a5.box_source, a5.box_confidence, a5.life_stage, a5.sex = "megadetector", 0.87, "juvenile", "unknown"
        photo["p5.jpg"].people = [[0.6, 0.1, 0.2, 0.5, 0.93]]
        photo["p5.jpg"].detections = {"source": "megadetector", "detector": "MDV5A"}
        ayla = s.scalar(select(Individual).where(Individual.name == "Ayla"))
        ayla.sex = "female"
        s.commit()
        ayla_id = ayla.id
        bram_id = s.scalar(select(Individual.id).where(Individual.name == "Bram"))
    record_decision(cat, query_image_id=ann["p3.jpg"], decision="same", candidate_image_id=ann["p1.jpg"],
                    user="carla")
    with cat.unit_of_work() as s:
        ops.merge_individuals(s, bram_id, ayla_id, user="dora")
        s.commit()
    with cat.unit_of_work() as s:
        _, split = ops.split_images(s, [ann["p2.jpg"]], user="erin", new_name="Cleo")
        s.commit()
        split_id = split.id
    with cat.unit_of_work() as s:
        ops.undo_event(s, split_id, user="erin")
        s.commit()
    out = root / "package"
    done = export_camtrap_dp(cat, ExportCamtrapDPRequest(user="exporter", out=str(out), zip=True,
                                                         title="Nyala study"))
    return SimpleNamespace(cat=cat, out=out, done=done, ann=ann, photos=photos, root=root)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    made = build_catalogue(tmp_path_factory.mktemp("camtrapdp-export"))
    yield made
    made.cat.close()


def _observation(built, photo_name: str) -> dict[str, str]:
    rows = [r for r in _rows(built.out, "observations") if r["observationID"] in
            ("obs-1" if photo_name == "p1.jpg" else f"ann-{built.ann[photo_name]}",)]
    assert len(rows) == 1, rows
    return rows[0]


# --------------------------------------------------------------------------- the package


def test_the_export_is_valid_camtrap_dp_checked_offline(built, offline):
    assert built.done.valid, built.done.details["problems"]
    assert validate_package(built.out) == []  # again, here, with every connection refused
    assert "checked valid against the Camtrap DP 1.0 profile" in built.done.message


def test_it_names_the_official_profile_and_schemas(built):
    descriptor = json.loads((built.out / "datapackage.json").read_text())
    assert descriptor["profile"] == f"https://raw.githubusercontent.com/tdwg/camtrap-dp/{CAMTRAP_DP_VERSION}/" \
                                    "camtrap-dp-profile.json" == PROFILE_URL
    assert {r["name"]: r["schema"] for r in descriptor["resources"]} == SCHEMA_URLS
    assert descriptor["title"] == "Nyala study" and descriptor["project"]["title"] == "Nyala study"
    assert descriptor["project"]["individualAnimals"] is True
    # p1 states timeLapse, the others nothing: motion-triggered, the camera-trap default
    assert descriptor["project"]["captureMethod"] == ["activityDetection", "timeLapse"]
    assert descriptor["taxonomic"] == [{"scientificName": "Tragelaphus angasii"}]
    # the deployments' first start and last end (the media run only from 2024-05-02 to 2024-05-06)
    assert descriptor["temporal"] == {"start": "2024-05-01", "end": "2024-05-20"}
    assert descriptor["spatial"] == {"type": "Point", "coordinates": [32.25, -27.5]}
    assert descriptor["contributors"] == [{"title": "exporter", "role": "contact"},
                                          {"title": "carla", "role": "contributor"},
                                          {"title": "dora", "role": "contributor"},
                                          {"title": "importer", "role": "contributor"}]


def test_photos_without_a_usable_deployment_are_left_out_and_counted(built):
    assert built.done.details["left_out"] == {"without a deployment": 1, "of a deployment without coordinates": 1}
    assert "left out: 1 photo(s) without a deployment, 1 photo(s) of a deployment without coordinates" \
        in built.done.message
    assert [d["deploymentID"] for d in _rows(built.out, "deployments")] == ["cam A/2024"]
    assert len(_rows(built.out, "media")) == 6


def test_deployment_rows_keep_their_camtrap_details(built):
    (dep,) = _rows(built.out, "deployments")
    assert dep["deploymentStart"] == "2024-05-01T08:00:00-04:00" and dep["deploymentEnd"] == "2024-05-20T18:30:00-04:00"
    assert (dep["latitude"], dep["longitude"], dep["locationID"], dep["cameraModel"]) == \
        ("-27.5", "32.25", "loc-A", "Reconyx HF2")
    assert dep["cameraHeight"] == "0.8" and dep["habitat"] == "thicket"
    assert "notACamtrapField" not in dep


def test_media_rows_and_their_files(built):
    media = {m["fileName"]: m for m in _rows(built.out, "media")}
    p1 = media["p1.jpg"]
    assert p1["mediaID"] == "m-001" and p1["deploymentID"] == "cam A/2024"
    assert p1["timestamp"] == "2024-05-02T06:15:30-04:00"  # whole seconds, the deployment's offset
    assert (p1["captureMethod"], p1["favorite"], p1["mediaComments"]) == ("timeLapse", "true", "dusk")
    assert p1["filePublic"] == "false" and p1["fileMediatype"] == "image/jpeg"
    assert media["p2.jpg"]["mediaID"].startswith("photo-")
    for m in media.values():
        assert m["filePath"] == f"media/cam_A_2024/{m['fileName']}"
        same = (built.out / m["filePath"]).read_bytes() == (built.photos / m["fileName"]).read_bytes()
        assert same is (m["fileName"] != "p5.jpg")  # p5 shows a person: its copy has the person blurred
    assert built.done.details["media_files"] == 6


def test_individual_and_classification_come_from_the_decisions(built):
    p1 = _observation(built, "p1.jpg")
    assert (p1["individualID"], p1["classificationMethod"], p1["classifiedBy"]) == ("Ayla", "human", "importer")
    assert (p1["eventID"], p1["behavior"], p1["count"]) == ("e1", "grazing", "1")
    assert p1["eventStart"] == p1["eventEnd"] == "2024-05-02T06:15:30-04:00"
    assert p1["observationLevel"] == "media" and p1["observationType"] == "animal"
    assert p1["scientificName"] == "Tragelaphus angasii"
    assert p1["bboxX"] == "" and p1["sex"] == "female"  # a whole-photo box has none; the individual's sex
    p3 = _observation(built, "p3.jpg")  # carla's "same individual"
    assert (p3["individualID"], p3["classificationMethod"], p3["classifiedBy"]) == ("Ayla", "human", "carla")
    assert p3["classificationTimestamp"].endswith("Z")
    p4 = _observation(built, "p4.jpg")  # Bram merged into Ayla by dora
    assert (p4["individualID"], p4["classifiedBy"]) == ("Ayla", "dora")
    p2 = _observation(built, "p2.jpg")  # erin's split was undone: the import's assignment stands
    assert (p2["individualID"], p2["classifiedBy"]) == ("Ayla", "importer")
    assert built.done.details["individuals"] == 1


def test_a_detector_box_without_an_individual_is_a_machine_observation(built):
    p5 = _observation(built, "p5.jpg")
    assert p5["individualID"] == "" and p5["scientificName"] == "Tragelaphus angasii"
    assert (p5["classificationMethod"], p5["classifiedBy"], p5["classificationProbability"]) == \
        ("machine", "MDV5A", "0.87")
    assert [p5[k] for k in ("bboxX", "bboxY", "bboxWidth", "bboxHeight")] == ["0.1", "0.2", "0.3", "0.4"]
    assert p5["lifeStage"] == "juvenile" and p5["sex"] == ""  # Rosette's "unknown" is no Camtrap DP sex


def test_an_empty_frame_is_blank_and_a_person_box_human(built):
    rows = _rows(built.out, "observations")
    media = {m["fileName"]: m["mediaID"] for m in _rows(built.out, "media")}
    (blank,) = [r for r in rows if r["mediaID"] == media["p8.jpg"]]
    assert blank["observationType"] == "blank" and blank["scientificName"] == "" and blank["bboxX"] == ""
    person = [r for r in rows if r["mediaID"] == media["p5.jpg"] and r["observationType"] == "human"]
    assert [(r["bboxX"], r["bboxY"], r["bboxWidth"], r["bboxHeight"], r["classifiedBy"],
             r["classificationProbability"]) for r in person] == [("0.6", "0.1", "0.2", "0.5", "MDV5A", "0.93")]
    assert len(rows) == 7  # five animals, one blank frame, one person


def test_the_zip_holds_the_package(built):
    zip_path = Path(built.done.zip_path)
    assert zip_path.name == "package.zip"
    with zipfile.ZipFile(zip_path) as zf:
        names = set(zf.namelist())
        assert {"datapackage.json", "deployments.csv", "media.csv", "observations.csv"} <= names
        assert sum(n.startswith("media/") and n.endswith(".jpg") for n in names) == 6


def test_the_cli_writes_a_package_and_prints_json(built, tmp_path, capsys):
    out = tmp_path / "cli-package"
    rc = cli_main(["--data-dir", str(built.root / "data"), "--user", "ana", "export", "camtrap-dp", str(out),
                   "--json", "--no-media"])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0 and printed["valid"] is True and printed["media"] == 6 and printed["media_files"] == 0
    assert not (out / "media").exists() and (out / "media.csv").is_file()


# --------------------------------------------------------------------------- broken packages fail, named


def _edit_csv(path: Path, row: int, column: str, value: str) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    rows[row][rows[0].index(column)] = value
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)


def test_a_broken_package_fails_with_named_errors(built, tmp_path, offline):
    broken = tmp_path / "broken"
    shutil.copytree(built.out, broken)
    _edit_csv(broken / "observations.csv", 2, "classificationMethod", "robot")
    _edit_csv(broken / "media.csv", 1, "deploymentID", "nowhere")
    descriptor = json.loads((broken / "datapackage.json").read_text())
    del descriptor["project"]["samplingDesign"]
    descriptor["resources"][2]["schema"] = "https://example.org/observations.json"
    (broken / "datapackage.json").write_text(json.dumps(descriptor))
    problems = validate_package(broken)
    found = {(p.resource, p.row, p.field) for p in problems}
    assert ("observations", 3, "classificationMethod") in found  # row 3: the header is row 1
    assert (None, None, "project") in found
    assert ("observations", None, "schema") in found
    assert any(p.resource == "media" and p.row == 2 and "foreign key" in p.message for p in problems)
    shown = [str(p) for p in problems]
    assert any(s.startswith("observations, row 3, field classificationMethod: ") and "robot" in s for s in shown)
    assert any("samplingDesign" in s for s in shown)


def test_a_missing_table_or_descriptor_is_named(tmp_path, built):
    assert "no datapackage.json" in str(validate_package(tmp_path)[0])
    partial = tmp_path / "partial"
    shutil.copytree(built.out, partial)
    (partial / "media.csv").unlink()
    assert [str(p) for p in validate_package(partial)] == ["media, field path: its file 'media.csv' is not in the "
                                                           "package"]


# --------------------------------------------------------------------------- the writer's pieces


def test_timestamps_are_written_as_the_schemas_want():
    minus4 = timezone(timedelta(hours=-4))
    assert timestamp(datetime(2024, 5, 2, 6, 15, 30, 999999, tzinfo=minus4)) == "2024-05-02T06:15:30-04:00"
    assert timestamp(datetime(2024, 5, 2, 6, 15, 30, tzinfo=timezone.utc)) == "2024-05-02T06:15:30Z"
    with pytest.raises(CamtrapDPError, match="has no time zone"):
        timestamp(datetime(2024, 5, 2, 6, 15, 30))


def test_a_row_with_a_column_the_table_lacks_is_refused(tmp_path):
    with pytest.raises(CamtrapDPError, match="media row 1: Camtrap DP's media table has no column colour"):
        write_table(tmp_path / "media.csv", "media", [{"mediaID": "m", "colour": "red"}])
    n = write_table(tmp_path / "d.csv", "deployments", [{"deploymentID": "d", "cameraDelay": 3.0}])
    (row,) = list(csv.DictReader(open(tmp_path / "d.csv")))
    assert n == 1 and row["cameraDelay"] == "3" and list(row) == table_fields("deployments")


def test_the_spatial_extent_is_the_deployments_bounding_box(tmp_path, offline):
    meta = PackageMetadata(title="t", created=datetime(2024, 6, 1, tzinfo=timezone.utc),
                           contributors=[{"title": "ana"}], project_title="t")
    deps = [{"deploymentID": d, "latitude": lat, "longitude": lon, "deploymentStart": "2024-05-01T00:00:00Z",
             "deploymentEnd": "2024-05-03T00:00:00Z"} for d, lat, lon in (("a", 1.0, 2.0), ("b", -1.5, 4.0))]
    written = write_package(tmp_path, meta, deployments=deps, media=[], observations=[])
    assert written.descriptor["spatial"] == {"type": "Polygon", "coordinates": [[[2.0, -1.5], [4.0, -1.5],
                                                                                 [4.0, 1.0], [2.0, 1.0],
                                                                                 [2.0, -1.5]]]}
    assert written.descriptor["temporal"] == {"start": "2024-05-01", "end": "2024-05-03"}  # no media: deployments
    assert validate_package(tmp_path) == []


def test_package_metadata_is_checked():
    with pytest.raises(CamtrapDPError, match="sampling design 'random' is not one of"):
        PackageMetadata(title="t", created=datetime.now(timezone.utc), contributors=[{"title": "a"}],
                        project_title="t", sampling_design="random")
    with pytest.raises(CamtrapDPError, match="needs a time zone"):
        PackageMetadata(title="t", created=datetime.now(), contributors=[{"title": "a"}], project_title="t")


def test_the_shipped_schemas_are_the_tdwg_files():
    assert (SCHEMA_DIR / "LICENSE").read_text().startswith("MIT License")
    for name in ("camtrap-dp-profile.json", "deployments-table-schema.json", "media-table-schema.json",
                 "observations-table-schema.json"):
        assert json.loads((SCHEMA_DIR / name).read_text())
    assert "individualID" in table_fields("observations")


def test_media_paths_are_safe_and_unique_in_the_package():
    dep = SimpleNamespace(key="../Station 1")
    taken: set[str] = set()
    first = SimpleNamespace(id=7, original_name="Station 1/day 2/IMG 01.JPG", blob_path="images/ab/abc.jpg")
    second = SimpleNamespace(id=9, original_name="other/img 01.jpg", blob_path="images/cd/cde.jpg")
    assert media_path(first, dep, taken=taken) == "media/Station_1/IMG_01.jpg"
    assert media_path(second, dep, taken=taken) == "media/Station_1/9-img_01.jpg"  # same name on a
    # case-insensitive disk: the photo's id keeps them apart


def test_made_up_ids_never_take_an_imported_one():
    assert fallback_id("photo", 2, "abcdef0123456789", stored={"m-001"}) == "photo-2"
    assert fallback_id("photo", 2, "abcdef0123456789", stored={"photo-2"}) == "photo-2-abcdef012345"


def test_a_merged_away_individual_leads_to_the_one_it_was_merged_into():
    a = SimpleNamespace(id=1, active=False, merged_into_id=2, name="A")
    b = SimpleNamespace(id=2, active=False, merged_into_id=3, name="B")
    c = SimpleNamespace(id=3, active=True, merged_into_id=None, name="C")
    everyone = {1: a, 2: b, 3: c}
    assert current_individual(a, everyone) is c and current_individual(c, everyone) is c
    assert current_individual(None, everyone) is None


# --------------------------------------------------------------------------- bad requests


def test_an_existing_folder_with_files_is_refused_and_left_alone(built, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(CatalogueError, match="already exists and is not an empty folder"):
        export_camtrap_dp(built.cat, ExportCamtrapDPRequest(user="ana", out=str(taken)))
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]


def test_a_failed_copy_leaves_no_half_written_package(built, tmp_path, monkeypatch):
    def full_disk(source, target):
        raise OSError(28, "No space left on device", str(target))

    monkeypatch.setattr(exporter.shutil, "copyfile", full_disk)
    with pytest.raises(CatalogueError, match="the disk is full where the Camtrap DP package is written"):
        export_camtrap_dp(built.cat, ExportCamtrapDPRequest(user="ana", out=str(tmp_path / "pkg")))
    assert not (tmp_path / "pkg").exists()
    (tmp_path / "empty").mkdir()  # an empty folder the curator chose stays, and stays empty
    with pytest.raises(CatalogueError, match="nothing of it was kept"):
        export_camtrap_dp(built.cat, ExportCamtrapDPRequest(user="ana", out=str(tmp_path / "empty")))
    assert list((tmp_path / "empty").iterdir()) == []


def test_a_catalogue_without_located_deployments_is_refused(tmp_path):
    cat = open_catalogue(tmp_path / "empty")
    try:
        with pytest.raises(CatalogueError, match="no deployment with coordinates"):
            export_camtrap_dp(cat, ExportCamtrapDPRequest(user="ana", out=str(tmp_path / "pkg")))
        assert not (tmp_path / "pkg").exists()
    finally:
        cat.close()


def test_an_invalid_package_is_written_reported_and_the_cli_fails(tmp_path, capsys, offline):
    """A value the standard does not admit (a featureType outside its list) is kept as it came, and named."""
    data = tmp_path / "data"
    cat = open_catalogue(data)
    try:
        with cat.unit_of_work() as s:
            s.add(Deployment(key="d1", lat=1.0, lon=2.0, start="2024-05-01T00:00:00+02:00",
                             end="2024-05-09T00:00:00+02:00", details={"featureType": "swamp"}))
            s.commit()
        done = export_camtrap_dp(cat, ExportCamtrapDPRequest(user="ana", out=str(tmp_path / "pkg")))
    finally:
        cat.close()
    assert not done.valid
    (problem,) = done.details["problems"]
    assert (problem["resource"], problem["row"], problem["field"]) == ("deployments", 2, "featureType")
    assert "NOT VALID Camtrap DP (1 problem(s), the first: deployments, row 2, field featureType" in done.message
    assert _rows(tmp_path / "pkg", "deployments")[0]["featureType"] == "swamp"
    rc = cli_main(["--data-dir", str(data), "export", "camtrap-dp", str(tmp_path / "pkg-cli")])
    captured = capsys.readouterr()
    assert rc == 1 and "NOT VALID" in captured.out
    assert "deployments, row 2, field featureType: " in captured.err and "swamp" in captured.err


def test_the_request_checks_its_values():
    with pytest.raises(ValueError, match="sampling design 'random' is not one of Camtrap DP's"):
        ExportCamtrapDPRequest(user="ana", sampling_design="random")
    asked = ExportCamtrapDPRequest(user="ana", out="  ", title=" Study ")
    assert asked.out is None and asked.title == "Study"
    assert ExportCamtrapDPRequest.from_dict(asked.to_dict()) == asked
