"""Imports under faults and odd inputs: a full disk, Ctrl-C landing after a photo's commit, a zip member too large
for a photo, the leftovers of a killed import, and a MegaDetector file imported again at a lower threshold."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
import subprocess
import tempfile
import zipfile
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

import core.readers.base as readers_base
import db.audit as audit
from app.cli import main as cli
from core.readers.zipped import ZipTree
from db.io.ingest import _Importer, ingest_path
from db.models import Photo
from db.session import open_catalogue
from db.storage import BlobStore
from tests.camtrapdp_package import tiny_jpeg, zip_package
from tests.test_camtrapdp_report import package


def _frames(root: Path, names: tuple[str, ...] = ("a.jpg", "b.jpg")) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    for name in names:
        PILImage.fromarray(rng.integers(0, 255, (60, 80, 3), dtype=np.uint8)).save(root / name)
    return root


# --------------------------------------------------------------------------- a lower threshold, imported again


@pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")
def test_a_lower_threshold_counts_the_animals_it_adds_to_photos_of_a_sighting(tmp_path):
    """Photos with a sighting (a manifest's, or an event of their station) given a new box at a lower threshold:
    the box is added without SQLAlchemy flushing the half-made annotation (its warning is an error here), and the
    summary counts the animal and the photo it went to, as the photo's own line does."""
    frames = _frames(tmp_path / "frames")
    (frames / "manifest.csv").write_text("filename,identity,flank,sighting\na.jpg,,,s1\nb.jpg,,,s1\n")
    box = {"category": "1", "conf": 0.9, "bbox": [0.1, 0.1, 0.3, 0.3]}
    md = {"info": {"format_version": "1.3", "detector": "md_v5a.0.0.pt"}, "detection_categories": {"1": "animal"},
          "images": [{"file": "a.jpg", "detections": [box, {"category": "1", "conf": 0.1,
                                                            "bbox": [0.6, 0.6, 0.3, 0.3]}]},
                     {"file": "b.jpg", "detections": [box]}]}
    (tmp_path / "md.json").write_text(json.dumps(md))
    cat = open_catalogue(tmp_path / "data")
    first = ingest_path(cat, frames / "manifest.csv", user="ana", detections=tmp_path / "md.json")
    assert first.tally.photos == 2 and first.tally.animals == 2
    again = ingest_path(cat, frames / "manifest.csv", user="ana", detections=tmp_path / "md.json",
                        min_confidence=0.05)
    lines = {it.name: it for it in again.files}
    assert lines["a.jpg"].status == "updated" and "added 1 animal box" in lines["a.jpg"].message
    assert lines["b.jpg"].status == "duplicate"
    assert (again.tally.photos, again.tally.animals, again.tally.photos_given_animals) == (0, 1, 1)
    assert again.tally.words().startswith("0 photos, 1 animal (1 of them added to 1 photo already catalogued)")
    third = ingest_path(cat, frames / "manifest.csv", user="ana", detections=tmp_path / "md.json",
                        min_confidence=0.05)
    assert third.tally.animals == 0 and third.counts["duplicate"] == 2


# --------------------------------------------------------------------------- a full disk


def test_a_full_disk_during_an_import_says_the_disk_is_full(tmp_path, capsys, monkeypatch):
    """SQLite reports a full disk met while writing its journal as "disk I/O error", and writing a photo's file
    fails with ENOSPC: each file's line says the disk is full, as start-up does, not "disk I/O error"."""
    data = tmp_path / "data"
    photos = _frames(tmp_path / "photos")
    open_catalogue(data).close()  # an existing catalogue

    def io_error(self, session, img):
        raise OperationalError("INSERT INTO images", {}, sqlite3.OperationalError("disk I/O error"))

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(_Importer, "_before_commit", io_error)
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10 ** 9, 10 ** 9 - 4096, 4096))
    assert cli(["--data-dir", str(data), "import", str(photos / "a.jpg")]) == 1
    out = capsys.readouterr().out
    assert "the disk is full (4 kB free where" in out and "disk I/O error" not in out
    monkeypatch.undo()

    def no_space(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", str(data / "images" / "x.tmp"))

    monkeypatch.setattr(BlobStore, "put", no_space)
    assert cli(["--data-dir", str(data), "import", str(photos / "b.jpg")]) == 1
    out = capsys.readouterr().out
    assert f"the disk is full where {data} is" in out and "nothing was kept for this file" in out
    with open_catalogue(data).unit_of_work() as s:
        assert s.scalar(select(Photo.id)) is None


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_in_the_audit_step_after_a_photo_is_saved_says_interrupted_and_resumes(tmp_path, capsys,
                                                                                      monkeypatch):
    """Ctrl-C lands in the audit trail's after-commit step, right after m3's photo was committed: no traceback,
    "interrupted", exit 130, m3 reported stored, the rest "import again to continue"; the same import again
    brings the rest and nothing twice."""
    path = package(tmp_path)
    data = str(tmp_path / "data")
    armed: list[str] = []
    real_write_head = audit.write_head

    def arm(self, session, img):
        if img.original_name == "media/m3.jpg":
            armed.append(img.original_name)

    def write_head(*args, **kwargs):
        if armed:
            armed.clear()
            raise KeyboardInterrupt
        return real_write_head(*args, **kwargs)

    monkeypatch.setattr(_Importer, "_before_commit", arm)
    monkeypatch.setattr(audit, "write_head", write_head)
    assert cli(["--data-dir", data, "--user", "ana", "import", str(path)]) == 130
    captured = capsys.readouterr()
    assert "interrupted" in captured.err and "Traceback" not in captured.err + captured.out
    assert "stored just before the import was interrupted" in captured.out
    assert "import again to continue" in captured.out and "Run the same import again to resume" in captured.out
    cat = open_catalogue(data)
    with cat.unit_of_work() as s:
        assert sorted(s.scalars(select(Photo.media_key))) == ["M1", "M2", "M3"]
    monkeypatch.undo()
    again = ingest_path(cat, path, user="ana")
    assert again.counts["duplicate"] == 3 and again.counts["imported"] == 1 and again.counts["error"] == 0


def test_ctrl_c_before_the_files_says_interrupted_with_exit_130(tmp_path, capsys, monkeypatch):
    """Ctrl-C while the package is read (before any file): the same words and exit status, no traceback."""
    import db.io.ingest as ingest

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(ingest, "read_camtrapdp", interrupted)
    assert cli(["--data-dir", str(tmp_path / "data"), "import", str(package(tmp_path))]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "import again to continue" in err


# --------------------------------------------------------------------------- large members, killed imports


def test_a_media_member_too_large_for_a_photo_is_refused_by_its_size_before_unpacking(tmp_path, monkeypatch):
    """The zip's listing gives each member's size: one over the limit is refused from it, never opened (so never
    spooled to the temporary folder); the other media come in."""
    root = tmp_path / "pkg"
    package(tmp_path)
    (root / "media" / "m2.jpg").write_bytes(tiny_jpeg(2) + os.urandom(300_000))  # larger than the limit below
    archive = zip_package(root, tmp_path / "survey.zip")
    monkeypatch.setattr(readers_base, "MAX_FILE_BYTES", 200_000)
    opened: list[str] = []
    real_open = ZipTree.open

    def spy(self, rel):
        opened.append(rel)
        return real_open(self, rel)

    monkeypatch.setattr(ZipTree, "open", spy)
    report = ingest_path(open_catalogue(tmp_path / "data"), archive, user="ana")
    big = next(it for it in report.files if "m2.jpg" in it.name)
    assert big.status == "error"
    assert "refused before unpacking: the zip lists it as 0.3 MB, more than the 0.2 MB a photo may be" in big.message
    assert "media/m2.jpg" not in opened and "media/m1.jpg" in opened
    assert report.counts["imported"] == 3


def test_an_import_removes_what_a_killed_import_left_in_the_temporary_folder(tmp_path, monkeypatch):
    """A killed import's spool folder (named after its process, now gone) is removed when the next import starts;
    a running import's is left alone, and so is what is not Rosette's."""
    spool = tmp_path / "tmp"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))
    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = spool / f"rosette-import-{gone.pid}-k1ll3d"
    dead.mkdir()
    (dead / f"rosette-import-{gone.pid}-member").write_bytes(b"x" * 1000)
    dead_file = spool / f"rosette-import-{gone.pid}-loose"
    dead_file.write_bytes(b"y")
    alive = spool / f"rosette-import-{os.getppid()}-running"
    alive.mkdir()
    other = spool / "someone-else"
    other.mkdir()
    report = ingest_path(open_catalogue(tmp_path / "data"), _frames(tmp_path / "photos") / "a.jpg", user="ana")
    assert report.counts["imported"] == 1
    assert not dead.exists() and not dead_file.exists()
    assert alive.exists() and other.exists()
    assert sorted(p.name for p in spool.iterdir()) == sorted([alive.name, other.name])  # its own spool is gone too


def test_a_zip_member_too_large_is_refused_from_the_listing_in_a_plain_zip(tmp_path, monkeypatch):
    """The same for a zip of photos (not a package): the listing refuses the member, the others come in."""
    photos = _frames(tmp_path / "photos")
    (photos / "big.jpg").write_bytes(tiny_jpeg(5) + os.urandom(300_000))
    archive = tmp_path / "photos.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for p in sorted(photos.iterdir()):
            zf.write(p, p.name)
    monkeypatch.setattr(readers_base, "MAX_FILE_BYTES", 200_000)
    report = ingest_path(open_catalogue(tmp_path / "data"), archive, user="ana")
    lines = {it.name: it for it in report.files}
    assert lines["big.jpg"].status == "error" and "refused before unpacking" in lines["big.jpg"].message
    assert report.counts["imported"] == 2
