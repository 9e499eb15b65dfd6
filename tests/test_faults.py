"""Bad input gets a clear message (issue 9's faults): jobs that do not exist, a data directory that is a file,
a malformed database URL, a locked database, formula-like CSV cells, control characters in names, short
manifest rows."""

from __future__ import annotations

import sqlite3

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
    from core.kaggle import KaggleFormatError, read_test_csv

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
    from db.ingest import ingest_path
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
