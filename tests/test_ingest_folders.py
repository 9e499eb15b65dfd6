"""Folders as the field stores them: what a zip's (or a folder's) first-level folders mean is chosen (stations,
individuals, nothing) and previewed, folder names never become individuals unasked, the manifest's identity is
optional, the import's report counts what came in and what was left out (in the Ingest tab's own words), and an
import sets the species of what comes in (``rosette import --species``, the Ingest tab's species field)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from app.cli import main as cli_main
from core.readers import ImportTally
from core.field.stations import deployment_spec
from db.audit import audit_rows
from db.records.deployments import store_deployments
from db.io.ingest import ingest_path, ingest_uploads
from db.models import DEFAULT_SPECIES_ID, Image, Individual, Photo, Species
from db.session import open_catalogue
from jobs.actions import ingest as services
from jobs.requests.ingest import ImportPathRequest, ImportUploadsRequest, PreviewFoldersRequest

STATIONS = ("ST1", "ST2", "ST3")


def photo(seed: int, when: str | None = "2024:05:03 10:00:00", size: tuple[int, int] = (64, 48)) -> bytes:
    """A small JPEG whose bytes differ per seed, with EXIF DateTime ``when`` (no zone)."""
    arr = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    exif = PILImage.Exif()
    if when:
        exif[306] = when
    PILImage.fromarray(arr).save(buf, format="JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def make_zip(path: Path, members: dict[str, bytes]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def station_zip(path: Path, *, seed: int = 0) -> Path:
    """A season as the field stores it: ``season/<station>/<card>/<frame>.jpg`` (the wrapper folder is ignored)."""
    return make_zip(path, {f"season/{st}/100RECNX/IMG_{i}.jpg": photo(seed + 10 * n + i)
                           for n, st in enumerate(STATIONS) for i in range(2)})


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


@pytest.fixture()
def cat(tmp_path):
    c = open_catalogue(tmp_path / "data")
    store_deployments(c, [deployment_spec({
        "deploymentID": f"D-{st}", "locationID": st, "locationName": f"Station {st}", "latitude": "-27.1",
        "longitude": "32.4", "deploymentStart": "2024-05-01T00:00:00+02:00",
        "deploymentEnd": "2024-05-30T23:59:59+02:00"}) for st in STATIONS], user="ana")
    return c


def individuals(cat) -> list[str]:
    with cat.unit_of_work() as s:
        return sorted(s.scalars(select(Individual.name)))


def photos(cat) -> dict[str, Photo]:
    with cat.unit_of_work() as s:
        out = {}
        for p in s.scalars(select(Photo)):
            p.deployment  # noqa: B018 - loaded before the session closes
            out[p.original_name] = p
        return out


def images(cat) -> dict[str, list[Image]]:
    with cat.unit_of_work() as s:
        out: dict[str, list[Image]] = {}
        for img in s.scalars(select(Image).order_by(Image.id)):
            out.setdefault(img.original_name.split("/")[-1], []).append(img)
        return out


# --------------------------------------------------------------------------- what the folders mean


def test_station_folder_zip_as_stations_links_deployments_and_makes_no_individuals(cat, tmp_path):
    z = station_zip(tmp_path / "up" / "season.zip")
    report = ingest_uploads(cat, [z], user="web", folders="stations")
    assert report.counts["imported"] == 6 and report.counts["error"] == 0
    assert individuals(cat) == []
    got = photos(cat)
    assert {name: p.deployment.key for name, p in got.items()} == {
        f"season.zip/{st}/100RECNX/IMG_{i}.jpg": f"D-{st}" for st in STATIONS for i in range(2)}
    assert got["season.zip/ST2/100RECNX/IMG_1.jpg"].taken_at == "2024-05-03T10:00:00+02:00"


def test_upload_default_reads_no_folder_name_and_the_path_import_links_matching_stations(cat, tmp_path):
    z = station_zip(tmp_path / "up" / "season.zip")
    report = ingest_uploads(cat, [z], user="web")  # nothing chosen: folder names mean nothing
    assert report.counts["imported"] == 6 and individuals(cat) == []
    assert all(p.deployment_id is None for p in photos(cat).values())
    # rosette import of the same zip: every folder names a stored station, so auto links them
    again = ingest_path(open_catalogue(tmp_path / "data2"), z, user="ana")
    assert again.format == "zip (folder) (folder names not read: --layout stations or --layout individuals reads them)"
    linked = ingest_path(cat, station_zip(tmp_path / "other.zip", seed=100), user="ana")
    assert linked.format == "zip (folder) (stations)" and individuals(cat) == []


def test_folder_names_become_individuals_only_when_chosen(cat, tmp_path):
    members = {"Nandi/a.jpg": photo(1, None), "Nandi/b.jpg": photo(2, None), "Zuri/c.jpg": photo(3, None)}
    z = make_zip(tmp_path / "up" / "animals.zip", members)
    assert ingest_uploads(cat, [z], user="web").counts["imported"] == 3
    assert ingest_path(cat, make_zip(tmp_path / "b.zip", {"Kito/d.jpg": photo(4, None),
                                                          "Tau/e.jpg": photo(5, None)}), user="ana").counts[
        "imported"] == 2
    assert individuals(cat) == []  # neither the upload nor a zip on this machine named anyone
    report = ingest_uploads(cat, [make_zip(tmp_path / "up2" / "animals.zip",
                                           {k: photo(10 + n, None) for n, k in enumerate(members)})],
                            user="web", folders="individuals")
    assert report.counts["imported"] == 3 and individuals(cat) == ["Nandi", "Zuri"]
    # a folder on this machine keeps its documented folder-per-individual reading
    write(tmp_path / "cats" / "Amber" / "x.jpg", photo(20, None))
    assert ingest_path(cat, tmp_path / "cats", user="ana").format == "folder"
    assert "Amber" in individuals(cat)
    ingest_path(cat, write(tmp_path / "flat" / "Bola" / "y.jpg", photo(21, None)).parent.parent, user="ana",
                layout="none")
    assert "Bola" not in individuals(cat)
    with pytest.raises(ValueError, match="one of stations, individuals, none"):
        ImportUploadsRequest(("a.zip",), user="web", folders="animals")


def test_preview_says_what_the_folders_are_before_importing(cat, tmp_path):
    z = station_zip(tmp_path / "up" / "season.zip")
    found = services.preview_folders(cat, PreviewFoldersRequest((str(z),), folders="stations"))
    assert found.suggested == "stations" and found.folders == STATIONS
    assert found.words.startswith("**3 station folders:** ST1 (2 photos), ST2 (2 photos), ST3 (2 photos).")
    assert "Matching deployments: ST1 → D-ST1; ST2 → D-ST2; ST3 → D-ST3." in found.words
    assert found.files_words == "**1 file in the upload box:** 1 zip"
    suggested = services.preview_folders(cat, PreviewFoldersRequest((str(z),)))  # nothing chosen yet
    assert suggested.chosen == "stations" and suggested.words == found.words
    none = services.preview_folders(cat, PreviewFoldersRequest((str(z),), folders="none"))
    assert none.chosen == "none"
    assert "not read" in none.words and "choose \"stations\"" in none.words
    as_animals = services.preview_folders(cat, PreviewFoldersRequest((str(z),), folders="individuals"))
    assert "become individuals" in as_animals.words and "Careful: ST1, ST2, ST3" in as_animals.words
    assert photos(cat) == {}  # a preview imports nothing
    # folders that name no station: suggested nothing (never individuals), and the stations reading says why
    other = make_zip(tmp_path / "up" / "mixed.zip", {"ST1/a.jpg": photo(1), "Creek/b.jpg": photo(2),
                                                     "loose.jpg": photo(3)})
    mixed = services.preview_folders(cat, PreviewFoldersRequest((str(other),), folders="stations"))
    assert mixed.suggested == "none"
    assert services.preview_folders(cat, PreviewFoldersRequest((str(other), str(z)))).chosen == "none"
    assert "Creek: they name no station of the Deployments tab" in mixed.words
    assert "1 photo is outside any folder" in mixed.words
    assert services.preview_folders(cat, PreviewFoldersRequest(())).words == ""


# --------------------------------------------------------------------------- manifests without identities


def test_manifest_without_identity_column_imports_unassigned(cat, tmp_path):
    folder = tmp_path / "m"
    write(folder / "a.jpg", photo(1))
    write(folder / "b.jpg", photo(2))
    (folder / "manifest.csv").write_text("filename,flank,deployment\na.jpg,L,ST1\nb.jpg,,ST2\n")
    report = ingest_path(cat, folder, user="ana")
    assert report.counts["imported"] == 2 and report.counts["error"] == 0
    got = images(cat)
    assert got["a.jpg"][0].individual_id is None and got["a.jpg"][0].flank.value == "left"
    assert {n.split("/")[-1]: p.deployment.key for n, p in photos(cat).items()} == {"a.jpg": "D-ST1",
                                                                                   "b.jpg": "D-ST2"}
    # uploaded with the photos, the same manifest works too
    up = tmp_path / "up"
    c = write(up / "c.jpg", photo(3))
    m = write(tmp_path / "m2.csv", b"filename,flank\nc.jpg,R\n")
    assert ingest_uploads(cat, [c], manifest=m, user="web").counts["imported"] == 1
    assert images(cat)["c.jpg"][0].individual_id is None


def test_empty_identity_leaves_the_animal_unassigned(cat, tmp_path):
    up = tmp_path / "up"
    files = [write(up / f"{n}.jpg", photo(i)) for i, n in enumerate(["named", "blank", "spaces"])]
    m = write(tmp_path / "m.csv", b"filename,identity\nnamed.jpg,Nandi\nblank.jpg,\nspaces.jpg,   \n")
    report = ingest_uploads(cat, files, manifest=m, user="web")
    assert report.counts["imported"] == 3 and report.counts["error"] == 0
    got = images(cat)
    assert got["blank.jpg"][0].individual_id is None and got["spaces.jpg"][0].individual_id is None
    assert got["named.jpg"][0].individual_id is not None and individuals(cat) == ["Nandi"]


# --------------------------------------------------------------------------- the report's counts


def md_json(path: Path) -> Path:
    """MegaDetector output for four frames: two animals and a person; one animal and one box below 0.2; nothing;
    and a frame whose only box lies outside the frame (refused as invalid)."""
    det = lambda c, conf, bbox: {"category": c, "conf": conf, "bbox": bbox}  # noqa: E731
    data = {"info": {"format_version": "1.4", "detector": "md_v5a.0.0.pt"},
            "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
            "images": [
                {"file": "ST1/f1.jpg", "detections": [det("1", 0.9, [0.05, 0.1, 0.3, 0.5]),
                                                      det("1", 0.8, [0.55, 0.1, 0.3, 0.5]),
                                                      det("2", 0.7, [0.4, 0.6, 0.2, 0.3])]},
                {"file": "ST1/f2.jpg", "detections": [det("1", 0.9, [0.1, 0.1, 0.5, 0.5]),
                                                      det("1", 0.1, [0.6, 0.6, 0.2, 0.2])]},
                {"file": "ST2/f3.jpg", "detections": []},
                {"file": "ST2/f4.jpg", "detections": [det("1", 0.9, [0.7, 0.7, 0.6, 0.6])]},
            ]}
    path.write_text(json.dumps(data))
    return path


def frames_zip(path: Path) -> Path:
    return make_zip(path, {f"{st}/{f}.jpg": photo(40 + i) for i, (st, f) in enumerate(
        [("ST1", "f1"), ("ST1", "f2"), ("ST2", "f3"), ("ST2", "f4")])})


def test_report_counts_animals_photos_people_below_invalid_and_empty_in_the_tabs_words(cat, tmp_path):
    z = frames_zip(tmp_path / "up" / "frames.zip")
    md = md_json(tmp_path / "md.json")
    outcome = services.import_uploads(cat, ImportUploadsRequest((str(z),), user="web", detections=str(md),
                                                                folders="stations"))
    rows = {name.split("/")[-1]: (status, details) for name, status, details in outcome.rows}
    assert outcome.tally == ('3 photos, 4 animals, 1 person blurred, 1 box below 0.2, 1 box refused as invalid '
                             '(each named below with its reason), 1 empty frame left out (tick "keep empty frames" '
                             'to keep them)')
    assert outcome.tally in outcome.summary
    # the frame whose only box was refused is not empty: it comes in for review, saying why
    status, details = rows["f4.jpg"]
    assert status == "imported" and "not an empty frame" in details and "refused as invalid" in details
    assert len(images(cat)["f4.jpg"]) == 1 and images(cat)["f4.jpg"][0].box_source == "whole-photo"
    # the empty frame, in the tab's own words
    status, details = rows["f3.jpg"]
    assert status == "empty" and 'tick "keep empty frames"' in details and "--keep-empty" not in details
    assert "--keep-empty" not in outcome.summary
    # the invalid box is named with its reason
    refused = [d for n, s, d in outcome.rows if n == "md.json" and "f4.jpg" in d]
    assert len(refused) == 1 and "detection #1" in refused[0] and "skipped" in refused[0]
    assert len(images(cat)["f1.jpg"]) == 2 and individuals(cat) == []


def test_shell_report_keeps_the_shells_words_and_counts_kept_empty_frames(cat, tmp_path, capsys):
    z = frames_zip(tmp_path / "frames.zip")
    md = md_json(tmp_path / "md.json")
    report = ingest_path(cat, z, user="ana", detections=md, layout="stations")
    assert "import with --keep-empty to keep empty frames" in {it.name.split("/")[-1]: it.message
                                                               for it in report.items}["f3.jpg"]
    assert report.tally.empty_left_out == 1 and report.tally.invalid_boxes == 1
    assert ImportTally(photos=1, animals=1).words() == "1 photo, 1 animal"  # no boxes: nothing about boxes
    assert cli_main(["--data-dir", str(tmp_path / "home"), "--user", "ana", "import", str(z), "--detections",
                     str(md), "--keep-empty", "--layout", "stations"]) == 0
    out = capsys.readouterr().out
    assert "4 photos, 4 animals, 1 person blurred, 1 box below 0.2, 1 box refused as invalid (each named below " \
           "with its reason), 1 empty frame kept, 0 empty frames left out" in out


# --------------------------------------------------------------------------- species


def test_species_sets_the_species_of_what_comes_in_created_and_audited(cat, tmp_path, capsys):
    home = tmp_path / "home"
    write(tmp_path / "frames" / "a.jpg", photo(1))
    write(tmp_path / "frames" / "b.jpg", photo(2))
    assert cli_main(["--data-dir", str(home), "--user", "ana", "import", str(tmp_path / "frames"),
                     "--species", "Tragelaphus  angasii"]) == 0
    capsys.readouterr()
    c = open_catalogue(home)
    with c.unit_of_work() as s:
        nyala = s.scalar(select(Species).where(Species.name == "Tragelaphus angasii"))
        assert nyala is not None
        assert set(s.scalars(select(Image.species_id))) == {nyala.id}
    created = [r for r in audit_rows(c, target="species") if r.details.get("name") == "Tragelaphus angasii"]
    assert len(created) == 1 and created[0].user == "ana"
    # the Ingest tab's field: an existing species is reused (case ignored); a manifest's species names a row's own
    up = tmp_path / "up"
    files = [write(up / "c.jpg", photo(3)), write(up / "d.jpg", photo(4))]
    m = write(tmp_path / "m.csv", b"filename,species\nd.jpg,Panthera pardus\n")
    outcome = services.import_uploads(c, ImportUploadsRequest(tuple(map(str, files)), user="web",
                                                              manifest=str(m), species="tragelaphus angasii"))
    assert outcome.counts["imported"] == 2
    with c.unit_of_work() as s:
        names = dict(s.execute(select(Image.original_name, Species.name).join(Species,
                                                                              Image.species_id == Species.id)).all())
        assert names["c.jpg"] == "Tragelaphus angasii" and names["d.jpg"] == "Panthera pardus"
        assert s.scalar(select(Species.id).where(Species.name == "tragelaphus angasii")) is None
    # no species: the default one, as before
    ingest_path(cat, write(tmp_path / "plain" / "e.jpg", photo(5)), user="ana")
    assert images(cat)["e.jpg"][0].species_id == DEFAULT_SPECIES_ID
    with pytest.raises(ValueError, match="up to 120 printable characters"):
        ImportPathRequest("x", user="ana", species="x" * 121)
    assert ImportPathRequest("x", user="ana", species="  ").species is None


def test_species_with_individual_folders_makes_the_individuals_of_that_species(cat, tmp_path):
    z = make_zip(tmp_path / "up" / "animals.zip", {"Nandi/a.jpg": photo(1, None), "Zuri/b.jpg": photo(2, None)})
    report = ingest_uploads(cat, [z], user="web", folders="individuals", species="Tragelaphus angasii")
    assert report.counts["imported"] == 2
    with cat.unit_of_work() as s:
        sp = s.scalar(select(Species.id).where(Species.name == "Tragelaphus angasii"))
        assert set(s.scalars(select(Individual.species_id))) == {sp}
