"""A Camtrap DP package coming in says what it did: one report line per kind of row that needed something done
(timestamps without a UTC offset, media outside their deployment or without a known one, boxes out of the frame,
deployments without coordinates), refusals before anything is written (one individualID with two species,
semicolon-separated tables), the schema check against the shipped Camtrap DP schemas naming the rule broken, a
dry run's linking, a summary that counts media, streamed zip members and an interrupted import that says what it
kept and resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from core.readers.camtrapdp import CamtrapDPError, read_camtrapdp
from db.io.ingest import _Importer, ingest_path
from db.models import Deployment, Image, Individual, Photo
from db.session import open_catalogue
from tests.camtrapdp_package import write_package, zip_package
from tests.test_camtrapdp_import import deployments, media, observations

SCHEMA = "schema check"


def valid_observations() -> list[dict]:
    """The shared test package's observations with what Camtrap DP 1.0.2 requires of every row (eventStart and
    eventEnd): a package valid against the shipped schemas."""
    times = {m["mediaID"]: m["timestamp"] for m in media()}
    rows = observations()
    for row in rows:
        if not row.get("eventStart"):
            row["eventStart"] = row["eventEnd"] = times[row["mediaID"]]
    return rows


def package(tmp_path: Path, *, deps=None, med=None, obs=None) -> Path:
    return write_package(tmp_path / "pkg", deployments() if deps is None else deps, media() if med is None else med,
                         valid_observations() if obs is None else obs)


def about(report_or_package) -> list:
    """The lines about the import as a whole (not one media file's own line)."""
    items = getattr(report_or_package, "items", None) or getattr(report_or_package, "problems")
    return [it for it in items if it.about_import]


def line(lines, words: str):
    found = [it for it in lines if words in it.message]
    assert len(found) == 1, [it.message for it in lines]
    return found[0]


def counts(cat) -> tuple[int, int, int]:
    with cat.unit_of_work() as s:
        return (s.scalar(select(func.count(Photo.id))), s.scalar(select(func.count(Image.id))),
                s.scalar(select(func.count(Deployment.id))))


# --------------------------------------------------------------------------- what was done, one line each


def test_a_valid_package_has_no_schema_lines_and_the_summary_counts_media(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path), user="ana")
    assert [it.message for it in about(report) if SCHEMA in it.message] == []
    assert [it.name for it in about(report)] == ["deployments"]
    # 5 media: 4 imported, blank M4 empty; the deployments line is about the package, not a sixth file
    assert report.counts["imported"] == 4 and report.counts["empty"] == 1 and sum(report.counts.values()) == 5
    summary = report.summary()
    assert "(5 media," in summary and "4 imported" in summary and "about the import as a whole: 1 imported" in summary


def test_timestamps_without_offset_get_one_line_with_the_offset_used(tmp_path):
    med = media()
    med[0]["timestamp"] = "2024-05-02T10:00:00"
    med[3]["timestamp"] = "2024-05-04T08:00:00"
    report = ingest_path(open_catalogue(tmp_path / "data"), package(tmp_path, med=med), user="ana")
    note = line(about(report), "have no UTC offset")
    assert note.status == "note"
    assert note.message.startswith("2 media timestamp(s) have no UTC offset") and "UTC+02:00" in note.message
    assert "M1 (row 2)" in note.message and "M4 (row 5)" in note.message and "M2" not in note.message
    # the rule it breaks, named by the schema check
    rule = line(about(report), "field timestamp")
    assert "media" in rule.message and "rows 2, 5" in rule.message and "%Y-%m-%dT%H:%M:%S%z" in rule.message


def test_media_outside_their_deployment_or_without_a_known_one_get_a_line_each(tmp_path):
    med = media()
    med[2]["timestamp"] = "2024-06-03T22:15:00+02:00"  # M3: after D2 ended
    med[3]["deploymentID"] = "D9"  # M4: a deployment the package does not list
    med[4]["deploymentID"] = ""  # M5: none
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, med=med), user="ana", keep_empty=True)
    outside = line(about(report), "outside every active period")
    assert outside.message.startswith("1 media were taken outside") and "M3 (row 4) of 'D2'" in outside.message
    assert "imported without a deployment" in outside.message
    unknown = line(about(report), "do not list")
    assert "M4 (row 5) deploymentID 'D9'" in unknown.message
    missing = line(about(report), "have no deploymentID")
    assert "M5 (row 6)" in missing.message
    with cat.unit_of_work() as s:
        unlinked = set(s.scalars(select(Photo.media_key).where(Photo.deployment_id.is_(None))))
    assert unlinked == {"M3", "M4", "M5"}


def test_each_box_out_of_range_gets_its_own_line(tmp_path):
    obs = valid_observations()
    obs[0].update(bboxX=0.8, bboxWidth=0.5)  # O1: far past the right edge
    obs[4].update(bboxY=-0.3)  # O5: above the top
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, obs=obs), user="ana")
    boxes = [it for it in about(report) if "cannot be used" in it.message]
    assert [(it.name, it.status) for it in boxes] == [("media/m1.jpg", "error"), ("media/m3.jpg", "error")]
    assert boxes[0].message.startswith("media 'M1': observation 'O1' (observations row 2): box ['0.8'")
    assert boxes[1].message.startswith("media 'M3': observation 'O5' (observations row 6): box")
    assert all("imported as a whole-photo annotation" in it.message for it in boxes)
    with cat.unit_of_work() as s:
        o1 = s.scalar(select(Image).where(Image.observation_key == "O1"))
        assert o1.box.is_whole and o1.observation_details["bboxX"] == "0.8"  # nothing lost


def test_deployments_without_coordinates_say_what_will_need_them(tmp_path):
    deps = deployments()
    for d in deps:
        d["latitude"] = d["longitude"] = None
    report = ingest_path(open_catalogue(tmp_path / "data"), package(tmp_path, deps=deps), user="ana")
    note = line(about(report), "no coordinates")
    assert note.status == "note" and "'D1', 'D2'" in note.message
    for need in ("Maps", "home ranges", "capthist", "Camtrap DP export"):
        assert need in note.message
    assert "no coordinates" not in line(about(report), "deployment(s), ").message  # said once, not twice


# --------------------------------------------------------------------------- refused before anything is written


def test_one_individual_with_two_species_is_refused_naming_the_rows(tmp_path):
    obs = valid_observations()
    obs[4]["individualID"] = "Vixen"  # O5 is a badger: Vixen is a fox in O1
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, obs=obs), user="ana")
    (item,) = report.items
    assert item.status == "error" and "individualID 'Vixen'" in item.message
    assert "'Vulpes vulpes' in observation O1 (row 2)" in item.message
    assert "'Meles meles' in observation O5 (row 6)" in item.message and "nothing was imported" in item.message
    assert counts(cat) == (0, 0, 0)
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Individual.id))) == 0


@pytest.mark.parametrize("delimiter,words", [(";", "semicolons (';')"), ("\t", "tabs")])
def test_a_table_not_separated_by_commas_is_refused_naming_the_delimiter(tmp_path, delimiter, words):
    path = package(tmp_path)
    table = path.parent / "media.csv"
    table.write_text(table.read_text().replace(",", delimiter))
    cat = open_catalogue(tmp_path / "data")
    (item,) = ingest_path(cat, path, user="ana").items
    assert item.status == "error" and f"media.csv (media) is separated by {words}, not commas" in item.message
    assert "nothing was imported" in item.message
    assert counts(cat) == (0, 0, 0)


def test_the_reader_refuses_before_the_schema_check(tmp_path):
    """A package the reader cannot read is refused with the reader's words; the schema check never runs."""
    obs = valid_observations()
    obs[1]["individualID"] = "Vixen"
    obs[1]["scientificName"] = "Meles meles"
    with pytest.raises(CamtrapDPError, match="two species") as caught:
        read_camtrapdp(package(tmp_path, obs=obs))
    assert SCHEMA not in str(caught.value)


# --------------------------------------------------------------------------- the schema check


def test_the_schema_check_names_the_rule_and_the_rows(tmp_path):
    deps = deployments()
    deps[1]["cameraHeight"] = "high"  # a number in Camtrap DP
    med = media()
    med[1]["captureMethod"] = "handheld"  # not one of activityDetection, timeLapse
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path, deps=deps, med=med), user="ana")
    height = line(about(report), "field cameraHeight")
    assert height.status == "note" and "Camtrap DP 1.0.2 schema check (frictionless" in height.message
    assert "deployments" in height.message and "type error" in height.message and "row 3" in height.message
    capture = line(about(report), "field captureMethod")
    assert "constraint error" in capture.message and "enum" in capture.message and "'handheld'" in capture.message
    assert report.counts["imported"] == 4  # the rest imports: the reader decided what can come in


def test_the_descriptor_is_checked_against_the_profile(tmp_path):
    path = package(tmp_path)
    text = path.read_text().replace('"samplingDesign": "opportunistic"', '"samplingDesign": "whenever"')
    path.write_text(text)
    report = ingest_path(open_catalogue(tmp_path / "data"), path, user="ana", dry_run=True)
    rule = line(about(report), "samplingDesign")
    assert "datapackage.json" in rule.message and "'whenever' is not one of" in rule.message


# --------------------------------------------------------------------------- a dry run's linking


def test_a_dry_run_reports_the_linking_it_would_do(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, package(tmp_path), user="ana", dry_run=True)
    items = {it.name: it for it in report.items}
    m1 = items["media/m1.jpg"].message
    assert "would be linked to deployment D1 (stored by this import)" in m1 and "in event E1" in m1
    assert "taken 2024-05-02T10:00:00+02:00" in m1
    m3 = items["media/m3.jpg"].message
    assert "would be linked to deployment D2" in m3 and "grouped into an event" in m3
    assert counts(cat) == (0, 0, 0)
    # photos catalogued before, without their station: a dry run of the package says it would link them
    folder = tmp_path / "pkg" / "media"
    ingest_path(cat, folder, user="ana", layout="individuals")
    again = ingest_path(cat, package(tmp_path), user="ana", dry_run=True)
    m2 = {it.name: it for it in again.items}["media/m2.jpg"]
    assert "would be linked to deployment D2" not in m2.message
    assert "would be linked to deployment D1 (stored by this import)" in m2.message
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Photo.id)).where(Photo.deployment_id.is_not(None))) == 0


# --------------------------------------------------------------------------- an interrupted import


def _catalogued(cat) -> tuple[list[str], list[str | None]]:
    with cat.unit_of_work() as s:
        return (sorted(s.scalars(select(Photo.media_key))),
                sorted(s.scalars(select(Image.observation_key)), key=str))


def _whole(tmp_path: Path, path: Path) -> tuple[list[str], list[str | None]]:
    """What the package gives when imported in one go, in a catalogue of its own."""
    cat = open_catalogue(tmp_path / "whole")
    ingest_path(cat, path, user="ana")
    return _catalogued(cat)


def test_a_stopped_import_says_what_it_kept_and_running_it_again_resumes(tmp_path):
    path = package(tmp_path)
    cat = open_catalogue(tmp_path / "data")
    asked = []

    def stop_after_two() -> bool:
        asked.append(1)
        return len(asked) >= 2

    report = ingest_path(cat, path, user="ana", should_cancel=stop_after_two)
    stopped = line(about(report), "Run the same import again to resume")
    assert stopped.message.startswith("the import was stopped by the curator after 2 of 5 files: 2 stored and kept")
    assert "3 not imported yet" in stopped.message
    assert report.counts["imported"] == 2 and report.counts["skipped"] == 3
    assert _catalogued(cat)[0] == ["M1", "M2"]
    again = ingest_path(cat, path, user="ana")
    assert again.counts["duplicate"] == 2 and again.counts["imported"] == 2 and again.counts["empty"] == 1
    assert _catalogued(cat) == _whole(tmp_path, path)  # complete, nothing twice


def test_an_interrupted_import_keeps_whole_files_only_and_resumes(tmp_path, monkeypatch):
    """Ctrl-C while the third media is being stored: that file leaves nothing (rows or new files), the first two
    stay, the report says so, and the same import run again completes without duplicates."""
    path = package(tmp_path)
    cat = open_catalogue(tmp_path / "data")

    def interrupt(self, session, img):
        if img.original_name == "media/m3.jpg":
            raise KeyboardInterrupt

    monkeypatch.setattr(_Importer, "_before_commit", interrupt)
    report = ingest_path(cat, path, user="ana")
    stopped = line(about(report), "Run the same import again to resume")
    assert stopped.message.startswith("the import was interrupted after 2 of 5 files: 2 stored and kept")
    items = {it.name: it for it in report.items if not it.about_import}
    assert items["media/m3.jpg"].status == "skipped" and "interrupted" in items["media/m3.jpg"].message
    assert _catalogued(cat)[0] == ["M1", "M2"]
    stored = {p.name for p in (cat.blobs.root / "images").rglob("*") if p.is_file()}
    assert len(stored) == 2  # M3's photo was written, then removed with its rows
    monkeypatch.undo()
    again = ingest_path(cat, path, user="ana")
    assert again.counts["duplicate"] == 2 and again.counts["imported"] == 2
    assert _catalogued(cat) == _whole(tmp_path, path)


# --------------------------------------------------------------------------- zip members streamed


def big_member_zip(root: Path, *, megabytes: int) -> tuple[Path, bytes]:
    """A package zip (deflated) whose one media file is a small JPEG followed by ``megabytes`` MB of other bytes
    (as a camera writing a large maker-note or a thumbnail strip would): decodable, but large. Written here, never
    checked in. Returns the zip and the media file's bytes' sha256."""
    import hashlib
    import os
    import zipfile

    from tests.camtrapdp_package import tiny_jpeg

    med = [{"mediaID": "M1", "deploymentID": "D1", "timestamp": "2024-05-02T10:00:00+02:00",
            "filePath": "media/big.jpg", "filePublic": "false", "fileMediatype": "image/jpeg"}]
    obs = [{"observationID": "O1", "deploymentID": "D1", "mediaID": "M1", "observationLevel": "media",
            "observationType": "animal", "scientificName": "Vulpes vulpes", "eventStart": med[0]["timestamp"],
            "eventEnd": med[0]["timestamp"]}]
    folder = root / "big"
    write_package(folder, deployments()[:1], med, obs, photos=False)
    (folder / "media").mkdir()
    digest = hashlib.sha256()
    with open(folder / "media" / "big.jpg", "wb") as fh:
        for chunk in [tiny_jpeg(1, (640, 480))] + [os.urandom(1 << 20)] * megabytes:
            fh.write(chunk)
            digest.update(chunk)
    archive = root / "big.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                zf.write(p, p.relative_to(folder).as_posix())
    return archive, digest.digest()


def test_a_large_zip_member_is_streamed_never_whole_in_memory(tmp_path, monkeypatch):
    """A 40 MB member: read whole, the import's Python allocations peak above 80 MB (the member, and its copy
    while decompressing); streamed, they stay under 24 MB (chunks of 1 MB, a 4 MB in-memory spool, the rest on
    disk). The stored photo is the member byte for byte, and its spooled copy is gone afterwards."""
    import hashlib
    import tempfile
    import tracemalloc

    archive, digest = big_member_zip(tmp_path, megabytes=40)
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    cat = open_catalogue(tmp_path / "data")
    tracemalloc.start()
    try:
        report = ingest_path(cat, archive, user="ana")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(it.name, it.status) for it in report.files] == [("media/big.jpg", "imported")]
    assert peak < 24 * 2**20, f"peak {peak / 2**20:.1f} MB"
    with cat.unit_of_work() as s:
        photo = s.scalar(select(Photo))
        blob = cat.blobs.path(photo.blob_path)
        assert photo.size_bytes == blob.stat().st_size > 40 * 2**20
    assert hashlib.sha256(blob.read_bytes()).digest() == digest and photo.content_hash == digest.hex()
    assert list(spool.iterdir()) == []  # the run's spool folder and its files are removed


def test_a_person_box_out_of_range_says_the_person_is_not_blurred_and_the_tally_counts_animal_boxes(tmp_path):
    obs = valid_observations()
    obs[3].update(bboxWidth=1.5)  # O4, the person on M3
    obs[0].update(bboxHeight=-0.2)  # O1, a fox on M1
    report = ingest_path(open_catalogue(tmp_path / "data"), package(tmp_path, obs=obs), user="ana")
    person = line(about(report), "'O4'")
    assert person.name == "media/m3.jpg" and "this person cannot be blurred by its box" in person.message
    assert "whole-photo annotation" not in person.message
    fox = line(about(report), "'O1'")
    assert "imported as a whole-photo annotation" in fox.message
    assert report.tally.invalid_boxes == 1 and report.tally.animals == 5


# --------------------------------------------------------------------------- the Ingest tab's and the shell's words


def test_the_ingest_tab_summary_counts_media_and_names_the_package_lines(tmp_path):
    from jobs.actions.ingest import import_uploads
    from jobs.requests.ingest import ImportUploadsRequest

    deps = deployments()
    deps[0]["latitude"] = deps[0]["longitude"] = None
    (tmp_path / "upload").mkdir()
    archive = zip_package(package(tmp_path, deps=deps).parent, tmp_path / "upload" / "survey.zip")
    outcome = import_uploads(open_catalogue(tmp_path / "data"),
                             ImportUploadsRequest((str(archive),), user="ana"))
    assert outcome.counts["imported"] == 4 and outcome.counts["note"] == 0  # media only
    # the deployments line; the reader's note; Camtrap DP requires latitude and longitude: two rules broken
    assert "4 imported" in outcome.summary and "about the import as a whole: 1 imported, 3 notes" in outcome.summary
    notes = [row[2] for row in outcome.rows if row[1] == "note"]
    assert len(notes) == 3 and "no coordinates" in notes[0]
    assert "field latitude" in notes[1] and "field longitude" in notes[2]


def test_the_shell_dry_run_prints_the_linking_and_counts_media(tmp_path, capsys):
    from app.cli import main as cli

    path = package(tmp_path)
    code = cli(["--data-dir", str(tmp_path / "cli"), "--user", "ana", "import", str(path), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0 and "would be linked to deployment D1 (stored by this import)" in out
    assert "(5 media," in out and "dry run (nothing written)" in out
