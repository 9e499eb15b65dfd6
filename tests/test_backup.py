"""Backups: consistent while decisions are being made; a restore equals what was backed up."""

from __future__ import annotations

import hashlib
import threading

import pytest

from app.cli import main as cli
from db.backup import backup, restore
from db.io.ingest import ingest_path
from db.identify.matching import record_decision
from db.models import Image, MatchDecision
from db.session import open_catalogue
from tests.synthetic_reid import make_reid_set


def _files(root):
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for kind in ("images", "thumbs", "masks") if (root / kind).is_dir()
            for p in sorted((root / kind).rglob("*")) if p.is_file()}


def test_backup_while_deciding_then_restore_and_compare(tmp_path):
    manifest = make_reid_set(tmp_path / "photos", individuals=4, photos_each=5, seed=13, masks=True)
    cat = open_catalogue(tmp_path / "data")
    ingest_path(cat, manifest, format="manifest", user="ana")
    with cat.unit_of_work() as s:
        ids = [i for (i,) in s.query(Image.id).order_by(Image.id)]
    stop = threading.Event()

    def curator():  # keeps deciding while the backup runs
        k = 0
        while not stop.is_set() and k < len(ids):
            record_decision(cat, query_image_id=ids[k], decision="unsure", user="ben")
            k += 1

    t = threading.Thread(target=curator)
    t.start()
    info = backup(cat, tmp_path / "backup")
    stop.set()
    t.join(30)
    assert info["counts"]["images"] == len(ids) and info["files"] >= 3 * len(ids)
    restored = restore(tmp_path / "backup", tmp_path / "restored")
    assert restored["database_sha256"] == info["database_sha256"]
    cat2 = open_catalogue(tmp_path / "restored")
    with cat2.unit_of_work() as s:
        assert s.query(Image).count() == len(ids)
        n_dec = s.query(MatchDecision).count()
    assert n_dec == info["counts"]["match_decisions"]  # one consistent moment, whatever came after
    assert _files(tmp_path / "restored") == _files(tmp_path / "data")
    cat2.close()
    cat.close()


def test_restore_refuses_a_damaged_backup_or_a_full_target_and_backup_a_used_folder(tmp_path, capsys):
    cat = open_catalogue(tmp_path / "data")
    backup(cat, tmp_path / "b")
    with pytest.raises(ValueError, match="not empty"):
        backup(cat, tmp_path / "b")
    with pytest.raises(ValueError, match="already holds a catalogue"):
        restore(tmp_path / "b", tmp_path / "data")
    db = tmp_path / "b" / "catalogue.db"
    db.write_bytes(db.read_bytes()[:-5] + b"xxxxx")
    with pytest.raises(ValueError, match="damaged backup"):
        restore(tmp_path / "b", tmp_path / "new")
    assert cli(["--data-dir", str(tmp_path / "new2"), "restore", str(tmp_path / "nowhere")]) == 1
    assert "is not a Rosette backup" in capsys.readouterr().err
    assert cli(["--data-dir", str(tmp_path / "data"), "backup", str(tmp_path / "b2")]) == 0
    cat.close()
