"""What leaves Rosette keeps people private and names its species: the Camtrap DP package and the catalogue zip blur
the person boxes of every exported photo unless ``keep`` is chosen (never the default, always audited) or the
photos are left out (``omit``); the package counts its observations of people, runs as a background job with
progress, writes an event-level observation back at event level, and an export of the species still called
"default" is refused before anything is written."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from app.cli import main as cli_main
from core.annotations import Box
from core.field.camtrapdp_writer import validate_package
from core.io.privacy import blurred_file, box_pixels
from db.audit import audit_rows, verify_chain
from db.catalogue import CatalogueError
from db.export_rules import PEOPLE_KEPT_ACTION
from db.io.ingest import ingest_path
from db.models import Image, Photo, Species
from db.session import open_catalogue
from jobs import queue
from jobs.actions.camtrapdp import export_camtrap_dp
from jobs.actions.export import camtrap_dp_export_status, export_catalogue, queue_camtrap_dp_export
from jobs.actions.population import export_capthist
from jobs.context import JobContext
from jobs.requests.camtrapdp import ExportCamtrapDPRequest
from jobs.requests.export import ExportCatalogueRequest
from jobs.requests.population import CapthistExportRequest
from tests.camtrapdp_package import write_package
from tests.test_camtrapdp_export import build_catalogue

#: p5's person box (build_catalogue) and the one this module adds to p2, an animal of Ayla's.
P5_PERSON = Box(0.6, 0.1, 0.2, 0.5)
P2_PERSON = Box(0.0, 0.0, 0.5, 0.5)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """build_catalogue's catalogue (p5: a person beside a detector's box, no individual), with a person box added
    to p2 (Ayla's), so a sheet of the catalogue zip shows a photo with people too."""
    made = build_catalogue(tmp_path_factory.mktemp("export-privacy"))
    with made.cat.unit_of_work() as s:
        p2 = s.scalar(select(Photo).where(Photo.original_name == "p2.jpg"))
        p2.people = [[*P2_PERSON.as_list(), 0.9]]
        s.commit()
    yield made
    made.cat.close()


def _rows(folder: Path, name: str) -> list[dict[str, str]]:
    with open(folder / f"{name}.csv", newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(PILImage.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)


def _inside_outside(original: bytes, exported: bytes, box: Box) -> tuple[float, float]:
    """Mean absolute pixel difference inside ``box`` and outside it."""
    a, b = _pixels(original), _pixels(exported)
    assert a.shape == b.shape
    left, top, right, bottom = box_pixels(box, a.shape[1], a.shape[0])
    inside = np.zeros(a.shape[:2], bool)
    inside[top:bottom, left:right] = True
    diff = np.abs(a - b).mean(axis=2)
    return float(diff[inside].mean()), float(diff[~inside].mean())


def _export(built, tmp_path, **options):
    return export_camtrap_dp(built.cat, ExportCamtrapDPRequest(user="exporter", out=str(tmp_path / "pkg"), **options))


def _kept_rows(cat) -> list:
    return [r for r in audit_rows(cat, action=PEOPLE_KEPT_ACTION)]


# --------------------------------------------------------------------------- a blurred copy of a file


def test_a_blurred_copy_is_upright_keeps_its_format_and_exif_and_changes_only_the_person(tmp_path):
    """A camera's JPEG stored sideways (EXIF orientation 6): the person box is where the screens show it, upright."""
    stored = np.random.default_rng(3).integers(0, 256, (60, 80, 3), dtype=np.uint8)  # 80 wide as stored
    exif = PILImage.Exif()
    exif[0x0112], exif[0x0132] = 6, "2024:05:02 10:00:00"
    PILImage.fromarray(stored).save(tmp_path / "cam.jpg", format="JPEG", quality=95, exif=exif.tobytes())
    person = Box(0.5, 0.0, 0.5, 0.4)
    copy = PILImage.open(io.BytesIO(blurred_file(tmp_path / "cam.jpg", [person])))
    assert copy.format == "JPEG" and copy.size == (60, 80)  # upright: 60 wide, as every screen shows it
    assert dict(copy.getexif()) == {0x0132: "2024:05:02 10:00:00"}  # its time kept, the orientation applied
    upright = PILImage.open(tmp_path / "cam.jpg").transpose(PILImage.Transpose.ROTATE_270)
    buf = io.BytesIO()
    upright.save(buf, format="PNG")
    out = io.BytesIO()
    copy.save(out, format="PNG")
    inside, outside = _inside_outside(buf.getvalue(), out.getvalue(), person)
    assert inside > 20 and outside < 6


# --------------------------------------------------------------------------- Camtrap DP: blur, keep, omit


def test_by_default_the_people_in_an_exported_photo_are_blurred(built, tmp_path):
    done = _export(built, tmp_path)
    assert done.valid, done.details["problems"]
    assert validate_package(Path(done.path)) == []
    media = {m["fileName"]: m for m in _rows(Path(done.path), "media")}
    original = (built.photos / "p5.jpg").read_bytes()
    exported = (Path(done.path) / media["p5.jpg"]["filePath"]).read_bytes()
    inside, outside = _inside_outside(original, exported, P5_PERSON)
    assert inside > 20 and outside < 6 and inside > 5 * outside  # the person's pixels changed, the rest hardly
    assert media["p5.jpg"]["fileMediatype"] == "image/jpeg" and media["p5.jpg"]["filePath"].endswith("p5.jpg")
    # photos without people travel as they are
    assert (Path(done.path) / media["p1.jpg"]["filePath"]).read_bytes() == (built.photos / "p1.jpg").read_bytes()
    assert done.details["people"] == "blur" and done.details["photos_with_people"] == 2
    assert "2 photo(s) showing people copied with the people blurred" in done.message


def test_keep_copies_the_originals_and_is_audited(built, tmp_path):
    before = len(_kept_rows(built.cat))
    done = _export(built, tmp_path, people="keep")
    assert done.valid, done.details["problems"]
    media = {m["fileName"]: m for m in _rows(Path(done.path), "media")}
    for name in ("p5.jpg", "p2.jpg"):
        assert (Path(done.path) / media[name]["filePath"]).read_bytes() == (built.photos / name).read_bytes()
    rows = _kept_rows(built.cat)
    assert len(rows) == before + 1
    row = rows[0]  # newest first
    assert row.user == "exporter" and row.target == "export:camtrap-dp"
    assert row.details == {"out": str(tmp_path / "pkg"), "photos_with_people": 2}
    assert verify_chain(built.cat).ok
    assert "copied unblurred (people: keep, recorded in the audit trail)" in done.message


def test_omit_leaves_the_photos_with_people_out_and_says_how_many(built, tmp_path):
    done = _export(built, tmp_path, people="omit")
    assert done.valid, done.details["problems"]
    assert validate_package(Path(done.path)) == []
    media = {m["fileName"]: m for m in _rows(Path(done.path), "media")}
    assert "p5.jpg" not in media and "p2.jpg" not in media and "p1.jpg" in media
    assert not list(Path(done.path).rglob("p5.jpg")) and not list(Path(done.path).rglob("p2.jpg"))
    assert done.details["left_out"]["showing people (people: omit)"] == 2
    ids = {m["mediaID"] for m in media.values()}
    assert all(o["mediaID"] in ids for o in _rows(Path(done.path), "observations") if o["mediaID"])
    assert done.details["people_observations"] == 0 and not _kept_rows_for(built, tmp_path)
    assert "2 photo(s) showing people left out (people: omit)" in done.message


def _kept_rows_for(built, tmp_path) -> list:
    return [r for r in _kept_rows(built.cat) if r.details.get("out") == str(tmp_path / "pkg")]


def test_the_observation_count_says_how_many_are_of_people(built, tmp_path):
    done = _export(built, tmp_path)
    humans = [o for o in _rows(Path(done.path), "observations") if o["observationType"] == "human"]
    assert len(humans) == done.details["people_observations"] == 2  # p5's and p2's person boxes
    assert f"{done.details['observations']} observation(s) (2 of people)" in done.message


def test_keep_is_never_the_default(built, tmp_path):
    assert ExportCamtrapDPRequest(user="a").people == "blur"
    assert ExportCatalogueRequest(user="a").people == "blur"
    with pytest.raises(ValueError, match="blur, omit, keep"):
        ExportCamtrapDPRequest(user="a", people="show")
    with pytest.raises(ValueError, match="blur, omit, keep"):
        ExportCatalogueRequest(user="a", people="unblurred")
    # the shell without --people blurs, and writes no audit row
    out = tmp_path / "cli"
    rc = cli_main(["--data-dir", str(built.root / "data"), "--user", "ana", "export", "camtrap-dp", str(out),
                   "--json"])
    assert rc == 0
    media = {m["fileName"]: m for m in _rows(out, "media")}
    assert (out / media["p5.jpg"]["filePath"]).read_bytes() != (built.photos / "p5.jpg").read_bytes()
    assert not [r for r in _kept_rows(built.cat) if r.details.get("out") == str(out)]
    # the Export tab's choice starts at blur
    from app.tabs.export import PEOPLE_LABELS
    assert PEOPLE_LABELS[0][1] == "blur" and {v for _, v in PEOPLE_LABELS} == {"blur", "omit", "keep"}


def test_the_shell_takes_people_keep_explicitly(built, tmp_path, capsys):
    out = tmp_path / "cli-keep"
    rc = cli_main(["--data-dir", str(built.root / "data"), "--user", "ana", "export", "camtrap-dp", str(out),
                   "--people", "keep", "--json"])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0 and printed["people"] == "keep" and printed["valid"] is True
    media = {m["fileName"]: m for m in _rows(out, "media")}
    assert (out / media["p5.jpg"]["filePath"]).read_bytes() == (built.photos / "p5.jpg").read_bytes()
    assert [r.user for r in _kept_rows(built.cat) if r.details.get("out") == str(out)] == ["ana"]


# --------------------------------------------------------------------------- the background job


def test_the_export_job_runs_with_progress_in_synchronous_mode(built, tmp_path, monkeypatch):
    seen: list[tuple[float, str | None]] = []
    real = JobContext.progress

    def record(self, fraction, message=None):
        seen.append((fraction, message))
        real(self, fraction, message)

    monkeypatch.setattr(JobContext, "progress", record)
    job_id, message = queue_camtrap_dp_export(built.cat, ExportCamtrapDPRequest(
        user="exporter", out=str(tmp_path / "job-pkg"), zip=True, title="Nyala"))
    assert f"job #{job_id}" in message and "people: blur" in message
    assert queue.get_job(built.cat, job_id).kind == "camtrap_dp_export"
    queue.run_job(built.cat, job_id)
    job = queue.get_job(built.cat, job_id)
    assert job.status.value == "succeeded", job.message
    assert job.progress == 1.0
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and any(0 < f < 1 for f in fractions)  # stepwise, not just done
    assert any(m and "writing the photos" in m for _, m in seen)
    done, words = camtrap_dp_export_status(built.cat, job_id)
    assert words == "" and done is not None and done.valid
    assert Path(done.zip_path).is_file() and done.details["media_files"] == 6
    assert done.details["people_observations"] == 2


def test_a_refused_export_job_fails_with_the_reason(built, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "x.txt").write_text("something")
    job_id, _ = queue_camtrap_dp_export(built.cat, ExportCamtrapDPRequest(user="exporter", out=str(taken)))
    queue.run_job(built.cat, job_id)
    done, words = camtrap_dp_export_status(built.cat, job_id)
    assert done is None and f"job #{job_id}" in words and "not an empty folder" in words


# --------------------------------------------------------------------------- event level


def test_an_event_level_observation_is_exported_at_event_level(tmp_path):
    """An event-level observation (two photos of event E1, no media-level animal) comes in as one annotation per
    photo, and goes out as the one event-level observation it was."""
    deps = [{"deploymentID": "D1", "locationID": "L1", "latitude": 51.05, "longitude": 4.2,
             "deploymentStart": "2024-05-01T00:00:00+02:00", "deploymentEnd": "2024-05-10T00:00:00+02:00"}]
    med = [{"mediaID": f"M{i}", "deploymentID": "D1", "eventID": "E1", "timestamp": f"2024-05-02T10:00:0{2 * i}+02:00",
            "filePath": f"media/m{i}.jpg", "filePublic": "false", "fileMediatype": "image/jpeg"} for i in (1, 2)]
    obs = [{"observationID": "O-event", "deploymentID": "D1", "eventID": "E1",
            "eventStart": "2024-05-02T10:00:00+02:00", "eventEnd": "2024-05-02T10:00:06+02:00",
            "observationLevel": "event", "observationType": "animal", "scientificName": "Vulpes vulpes",
            "count": 2, "behavior": "foraging"}]
    cat = open_catalogue(tmp_path / "data")
    try:
        report = ingest_path(cat, write_package(tmp_path / "in", deps, med, obs), format="camtrap-dp", user="ana")
        with cat.unit_of_work() as s:
            keys = sorted(a.observation_key for a in s.scalars(select(Image)))
        assert keys == ["O-event@M1", "O-event@M2"], [(i.name, i.status, i.message) for i in report.items]
        done = export_camtrap_dp(cat, ExportCamtrapDPRequest(user="ana", out=str(tmp_path / "out")))
        assert done.valid, done.details["problems"]
        rows = _rows(tmp_path / "out", "observations")
        (event,) = rows
        assert (event["observationID"], event["observationLevel"], event["mediaID"]) == ("O-event", "event", "")
        assert (event["eventID"], event["eventStart"], event["eventEnd"]) == \
            ("E1", "2024-05-02T10:00:00+02:00", "2024-05-02T10:00:06+02:00")
        assert (event["count"], event["behavior"], event["scientificName"]) == ("2", "foraging", "Vulpes vulpes")
        assert event["bboxX"] == "" and done.details["event_observations"] == 1
        descriptor = json.loads((tmp_path / "out" / "datapackage.json").read_text())
        assert descriptor["project"]["observationLevel"] == ["media", "event"]
    finally:
        cat.close()


# --------------------------------------------------------------------------- the species "default"


def _call_nyala_default(cat, *, back: bool = False) -> None:
    """Give the catalogue's nyala species the name "default" (the unused first species steps aside), or back."""
    if not back:
        with cat.unit_of_work() as s:
            s.scalar(select(Species).where(Species.name == "default")).name = "(spare)"
            s.commit()
        with cat.unit_of_work() as s:
            s.scalar(select(Species).where(Species.name == "Tragelaphus angasii")).name = "default"
            s.commit()
        return
    with cat.unit_of_work() as s:
        s.scalar(select(Species).where(Species.name == "default")).name = "Tragelaphus angasii"
        s.commit()
    with cat.unit_of_work() as s:
        s.scalar(select(Species).where(Species.name == "(spare)")).name = "default"
        s.commit()


def test_an_export_of_the_species_still_called_default_is_refused(built, tmp_path, capsys):
    _call_nyala_default(built.cat)
    try:
        with pytest.raises(CatalogueError, match="Species tab") as refused:
            _export(built, tmp_path)
        assert "'default'" in str(refused.value) and "nothing was written" in str(refused.value)
        assert not (tmp_path / "pkg").exists()
        out = tmp_path / "refused"
        rc = cli_main(["--data-dir", str(built.root / "data"), "--user", "ana", "export", "camtrap-dp", str(out)])
        printed = capsys.readouterr()
        assert rc != 0 and "Species tab" in printed.out + printed.err and not out.exists()
        zip_out = tmp_path / "catalogue.zip"
        with pytest.raises(CatalogueError, match="Species tab"):
            export_catalogue(built.cat, ExportCatalogueRequest(user="ana", out=str(zip_out)))
        assert not zip_out.exists() and not zip_out.with_name("catalogue.zip.part").exists()
        histories = tmp_path / "capthist"
        with pytest.raises(CatalogueError, match="Species tab"):
            export_capthist(built.cat, CapthistExportRequest(species="default", occasion_days=1, out=str(histories)))
        assert not histories.exists()
    finally:
        _call_nyala_default(built.cat, back=True)
    assert _export(built, tmp_path).valid  # named, it goes out


# --------------------------------------------------------------------------- the catalogue zip


def _p2_picture(zip_path: str, ann_id: int) -> bytes | None:
    with zipfile.ZipFile(zip_path) as zf:
        found = [n for n in zf.namelist() if n.startswith("sheets/img/") and n.endswith(f"-{ann_id}.jpg")]
        return zf.read(found[0]) if found else None


def test_the_catalogue_zip_blurs_omits_or_keeps_the_people_of_its_sheets(built, tmp_path):
    ann = built.ann["p2.jpg"]
    blurred = export_catalogue(built.cat, ExportCatalogueRequest(user="ana", out=str(tmp_path / "blur.zip")))
    kept = export_catalogue(built.cat, ExportCatalogueRequest(user="ana", out=str(tmp_path / "keep.zip"),
                                                              people="keep"))
    omitted = export_catalogue(built.cat, ExportCatalogueRequest(user="ana", out=str(tmp_path / "omit.zip"),
                                                                 people="omit"))
    blur_picture, keep_picture = _p2_picture(blurred.path, ann), _p2_picture(kept.path, ann)
    assert blur_picture is not None and keep_picture is not None and _p2_picture(omitted.path, ann) is None
    inside, outside = _inside_outside(keep_picture, blur_picture, Box(0.0, 0.0, 0.45, 0.45))
    assert inside > 20 and inside > 5 * outside  # the person's corner blurred, the rest alike
    assert "1 sheet picture(s) showing people, the people blurred" in blurred.summary
    assert "1 sheet picture(s) showing people left out (people: omit)" in omitted.summary
    rows = [r for r in _kept_rows(built.cat) if r.target == "export:catalogue"]
    assert [r.details for r in rows] == [{"out": str(tmp_path / "keep.zip"), "photos_with_people": 1}]
    with built.cat.unit_of_work() as s:
        assert s.get(Image, ann).individual_id is not None  # a sheet's animal: the check above means something
