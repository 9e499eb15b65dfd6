"""Bad input gets a clear message (issue 9's faults): jobs that do not exist, a data directory that is a file,
a malformed database URL, a locked database, formula-like CSV cells, control characters in names, short
manifest rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.cli import main as cli
from db import catalogue as ops
from db.catalogue import CatalogueError
from db.session import open_catalogue


def test_cli_messages_instead_of_tracebacks(tmp_path, capsys):
    d = str(tmp_path / "data")
    assert cli(["--data-dir", d, "jobs", "cancel", "999"]) == 1
    assert "no job 999" in capsys.readouterr().err
    afile = tmp_path / "a-file"
    afile.write_text("x")
    assert cli(["--data-dir", str(afile), "stats"]) == 1
    assert "is a file, not a folder" in capsys.readouterr().err
    assert cli(["--data-dir", d, "--database-url", "nonsense://x", "stats"]) == 1
    assert "cannot use the database URL" in capsys.readouterr().err


def test_a_locked_database_is_a_message(tmp_path, capsys):
    from db.models import Image

    cat = open_catalogue(tmp_path / "data")
    with cat.unit_of_work() as s:
        s.add(Image(content_hash="h", original_name="a.jpg", blob_path="images/h.jpg", format="JPEG", mode="RGB",
                    width=4, height=4, size_bytes=1))
        s.commit()
    cat.close()
    locker = sqlite3.connect(tmp_path / "data" / "catalogue.db", timeout=0.1)
    locker.execute("PRAGMA busy_timeout = 0")
    locker.execute("BEGIN EXCLUSIVE")
    try:
        import db.session as session

        old = session._sqlite_pragmas

        def short_wait(conn, rec):  # do not wait the usual 30 s in a test
            old(conn, rec)
            conn.execute("PRAGMA busy_timeout=200")

        session._sqlite_pragmas = short_wait
        try:
            rc = cli(["--data-dir", str(tmp_path / "data"), "flank", "1", "left"])
        finally:
            session._sqlite_pragmas = old
    finally:
        locker.rollback()
        locker.close()
    assert rc == 1
    assert "locked by another program" in capsys.readouterr().err


@pytest.mark.parametrize("row_id,bad", [("=cmd|' /C calc'!A0", True), ("+1+1", True), ("@SUM(A1)", True),
                                        ("-2+3", True), ("-1", False), ("q_17", False), ("42", False)])
def test_formula_like_row_ids_are_refused(tmp_path, row_id, bad):
    from core.io.kaggle import KaggleFormatError, read_test_csv

    p = tmp_path / "test.csv"
    p.write_text(f'row_id,query_image,gallery_image\n"{row_id}",a.png,b.png\n')
    if bad:
        with pytest.raises(KaggleFormatError, match="spreadsheet formula"):
            read_test_csv(p)
    else:
        assert read_test_csv(p)[0].row_id == row_id


def test_names_with_control_characters_are_refused(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    with cat.unit_of_work() as s:
        for bad in ("evil\x1b[31mred", "nul\x00name", "two\nlines"):
            with pytest.raises(CatalogueError, match="control characters"):
                ops.create_individual(s, bad, user="ana")
        ind = ops.create_individual(s, "Ximena", user="ana")
        with pytest.raises(CatalogueError, match="control characters"):
            ops.rename_individual(s, ind.id, "X\x07", user="ana")
    cat.close()


def test_a_short_manifest_row_is_imported_with_a_warning(tmp_path):
    from db.io.ingest import ingest_path
    from tests.synthetic_reid import make_reid_set

    manifest = make_reid_set(tmp_path / "photos", individuals=2, photos_each=2, seed=14)
    lines = manifest.read_text().splitlines()
    lines[1] = lines[1].split(",")[0]  # the first photo's row has only its file name
    manifest.write_text("\n".join(lines) + "\n")
    cat = open_catalogue(tmp_path / "data")
    report = ingest_path(cat, manifest, format="manifest", user="ana")
    short = [i for i in report.items if "warning" in (i.message or "")]
    assert len(short) == 1 and "only 1 of the header's 4 cells: no identity, flank, sighting" in short[0].message
    assert short[0].status == "imported"
    cat.close()


def _small_catalogue(data_dir):
    from db.models import Image

    cat = open_catalogue(data_dir)
    with cat.unit_of_work() as s:
        ind = ops.create_individual(s, "Amber", user="ana")
        s.add(Image(content_hash="h", original_name="a.jpg", blob_path="images/h.jpg", format="JPEG", mode="RGB",
                    width=4, height=4, size_bytes=1, individual_id=ind.id))
        s.commit()
    cat.close()


@pytest.mark.parametrize("folder_writable", [True, False])
def test_a_catalogue_that_cannot_be_written_opens_read_only(tmp_path, capsys, monkeypatch, folder_writable):
    """As root every file is writable, so the permission check is simulated; SQLite's refusal is real."""
    import db.session as session

    data = tmp_path / "data"
    _small_catalogue(data)
    db_file = data / "catalogue.db"
    real = session.writable
    monkeypatch.setattr(session, "writable", lambda p: False if p == db_file or (p == data and not folder_writable)
                        else real(p))
    before = db_file.read_bytes()
    assert cli(["--data-dir", str(data), "stats"]) == 0
    captured = capsys.readouterr()
    assert "individuals  1" in captured.out and "open read-only" in captured.err
    assert cli(["--data-dir", str(data), "jobs", "list"]) == 0
    assert cli(["--data-dir", str(data), "flank", "1", "left"]) == 1
    assert "it is read-only" in capsys.readouterr().err
    cat = open_catalogue(data, read_only=None)
    assert cat.read_only and ("immutable=1" in cat.url) == (not folder_writable)
    cat.close()
    if not folder_writable:
        assert db_file.read_bytes() == before  # not one byte written


def test_read_only_needs_an_existing_catalogue_at_the_current_schema(tmp_path):
    with pytest.raises(ValueError, match="must already exist"):
        open_catalogue(tmp_path / "none", read_only=True)
    data = tmp_path / "data"
    _small_catalogue(data)
    db = sqlite3.connect(data / "catalogue.db")
    db.execute("UPDATE alembic_version SET version_num = '0004'")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match="read-only and needs upgrading"):
        open_catalogue(data, read_only=True)


def test_a_full_disk_at_start_up_is_a_message(tmp_path, capsys, monkeypatch):
    import errno

    from sqlalchemy.exc import OperationalError

    import db.session as session

    def full(_engine):
        raise OperationalError("CREATE TABLE x", {}, sqlite3.OperationalError("database or disk is full"))

    monkeypatch.setattr(session, "upgrade_to_head", full)
    assert cli(["--data-dir", str(tmp_path / "data"), "serve", "--port", "1"]) == 1
    assert "the disk is full" in capsys.readouterr().err
    monkeypatch.undo()

    def no_space(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))

    import app.commands.serve as serve

    monkeypatch.setattr(serve, "seed_demo", no_space)
    assert cli(["--data-dir", str(tmp_path / "data2"), "serve", "--port", "1"]) == 1
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err


def test_parallel_first_starts_on_a_new_data_folder_all_succeed(tmp_path):
    """Three imports into a data folder that does not exist yet, at once: the migrations run one after the
    other under a lock file, so all three succeed (issue 14, item 16: 1-2 of 3 failed with "table ... already
    exists")."""
    import subprocess
    import sys

    from PIL import Image as PILImage

    data = tmp_path / "fresh"
    photos = []
    for k in range(3):
        p = tmp_path / f"p{k}.png"
        PILImage.new("RGB", (32, 32), (40 * k, 90, 160)).save(p)
        photos.append(p)
    procs = [subprocess.Popen([sys.executable, "-m", "app.cli", "--data-dir", str(data), "import", str(p)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in photos]
    results = [(p.wait(180), *p.communicate()) for p in procs]
    assert [r[0] for r in results] == [0, 0, 0], [r[2][-500:] for r in results]
    from db.session import open_catalogue

    cat = open_catalogue(data)
    from db.models import Image

    with cat.unit_of_work() as s:
        assert s.query(Image).count() == 3
    assert (data / ".migrate.lock").exists()


def test_a_full_disk_with_an_existing_catalogue_says_so(tmp_path, capsys, monkeypatch):
    """SQLite reports a full disk met while writing its journal as "disk I/O error": with little space left
    where the catalogue is, the message says the disk is full (issue 14, item 19)."""
    import shutil
    from collections import namedtuple

    from sqlalchemy.exc import OperationalError

    import db.catalogue as ops
    from db.session import open_catalogue

    data = tmp_path / "data"
    cat = open_catalogue(data)
    with cat.unit_of_work() as s:
        ops.create_individual(s, "Amber", user="ana")
        s.commit()
    cat.close()

    def io_error(*_a, **_k):
        raise OperationalError("UPDATE individuals", {}, sqlite3.OperationalError("disk I/O error"))

    monkeypatch.setattr(ops, "rename_individual", io_error)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10 ** 9, 10 ** 9 - 4096, 4096))
    assert cli(["--data-dir", str(data), "rename", "1", "Amber II"]) == 1
    err = capsys.readouterr().err
    assert "the disk is full (4 kB free" in err and "disk I/O error" not in err
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: usage(10 ** 12, 10 ** 9, 10 ** 11))
    assert cli(["--data-dir", str(data), "rename", "1", "Amber II"]) == 1
    assert "disk I/O error" in capsys.readouterr().err  # plenty of space: the error is what SQLite said


def test_doctor_removes_what_a_killed_import_left(tmp_path, capsys):
    """An import killed between writing files and committing its rows leaves unreferenced files: `rosette doctor`
    lists them (--dry-run) and removes them, never a referenced photo, a mask named by the audit trail, or a
    file young enough to belong to a running import (issue 14, item 21)."""
    import json
    import os
    import time as _time

    from PIL import Image as PILImage

    data = tmp_path / "data"
    photo = tmp_path / "p.png"
    PILImage.new("RGB", (32, 32), (10, 120, 200)).save(photo)
    assert cli(["--data-dir", str(data), "import", str(photo)]) == 0
    kept = sorted(p for p in data.rglob("*") if p.is_file() and p.parts[-3] in ("images", "thumbs"))
    old = _time.time() - 3600
    leftovers = [data / "images" / "ab" / ("ab" + "0" * 62 + ".jpg"), data / "thumbs" / "ab" / ("ab" + "1" * 62 + ".jpg"),
                 data / "images" / "cd" / ".tmp-half-written"]
    for p in leftovers:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * 1000)
        os.utime(p, (old, old))
    fresh = data / "images" / "ef" / ("ef" + "2" * 62 + ".jpg")
    fresh.parent.mkdir(parents=True, exist_ok=True)
    fresh.write_bytes(b"y")
    capsys.readouterr()
    assert cli(["--data-dir", str(data), "doctor", "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["files"]) == 3 and report["removed"] == 0 and len(report["too_young"]) == 1
    assert all(p.exists() for p in leftovers)
    assert cli(["--data-dir", str(data), "doctor"]) == 0
    assert "removed 3 unreferenced file(s)" in capsys.readouterr().out
    assert not any(p.exists() for p in leftovers) and fresh.exists()
    assert all(p.exists() for p in kept)  # the imported photo and its thumbnail stay


def test_a_full_disk_while_exporting_camtrap_dp_names_the_target_and_keeps_nothing(tmp_path, capsys, monkeypatch):
    """The operating system's error names the file copied *from* (the catalogue's own photo); the message names
    the package being written, says nothing was kept, and nothing is: neither the half-written folder nor a
    half-written zip."""
    import errno
    import shutil

    from db.io.ingest import ingest_path
    from tests.test_camtrapdp_report import package

    data = tmp_path / "data"
    cat = open_catalogue(data)
    ingest_path(cat, package(tmp_path), user="ana")
    cat.close()
    assert cli(["--data-dir", str(data), "species", "rename", "default", "Felis silvestris"]) == 0
    real_copy = shutil.copyfile

    def no_space(source, target, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", str(source))

    out = tmp_path / "out" / "season"
    monkeypatch.setattr(shutil, "copyfile", no_space)
    assert cli(["--data-dir", str(data), "export", "camtrap-dp", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"the disk is full where the Camtrap DP package is written ({out}); nothing of it was kept" in err
    assert str(data / "images") not in err and not out.exists()
    monkeypatch.setattr(shutil, "copyfile", real_copy)

    def half_a_zip(base, fmt, root_dir=None, **_k):
        with open(f"{base}.zip", "wb") as fh:
            fh.write(b"PK")
        raise OSError(errno.ENOSPC, "No space left on device", f"{base}.zip")

    monkeypatch.setattr(shutil, "make_archive", half_a_zip)
    assert cli(["--data-dir", str(data), "export", "camtrap-dp", str(out), "--zip"]) == 1
    err = capsys.readouterr().err
    assert f"the disk is full where the Camtrap DP package's zip is written ({out}.zip); nothing of it was kept" in err
    assert not out.exists() and not Path(f"{out}.zip").exists()


def test_an_admin_password_given_to_serve_after_accounts_exist_is_named_as_ignored(tmp_path, capsys, monkeypatch):
    """$ROSETTE_ADMIN_PASSWORD only sets the first admin's password: on a catalogue with its admin already, serve
    says at start, in one line, that it ignored it (and says nothing about it when it is not set)."""
    import app.commands.serve as serve

    class Stop(Exception):
        pass

    def stop(*_a, **_k):  # the first step after the accounts: no server is started in this test
        raise Stop

    monkeypatch.setattr(serve, "seed_demo", stop)
    data = str(tmp_path / "data")
    monkeypatch.setenv("ROSETTE_ADMIN_PASSWORD", "first-password-1")
    with pytest.raises(Stop):
        cli(["--data-dir", data, "serve", "--port", "1"])
    assert "first admin account 'admin' created" in capsys.readouterr().out
    monkeypatch.setenv("ROSETTE_ADMIN_PASSWORD", "another-password-2")
    with pytest.raises(Stop):
        cli(["--data-dir", data, "serve", "--port", "1"])
    out = capsys.readouterr().out
    ignored = [line for line in out.splitlines() if "ROSETTE_ADMIN_PASSWORD" in line]
    assert len(ignored) == 1 and "is ignored: this catalogue has its accounts already" in ignored[0]
    monkeypatch.delenv("ROSETTE_ADMIN_PASSWORD")
    with pytest.raises(Stop):
        cli(["--data-dir", data, "serve", "--port", "1"])
    assert "ROSETTE_ADMIN_PASSWORD" not in capsys.readouterr().out
