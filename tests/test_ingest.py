"""db.io.ingest and ``rosette import``: every format, every bad input, idempotence, atomicity."""

from __future__ import annotations

import csv
import io
import json
import os
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from app.cli import main as cli_main
from core.inspect.masking import decode_mask_png
from core.readers import FORMATS, detect_format
from db.io import ingest as ingest_mod
from db.catalogue import catalogue_stats
from db.io.ingest import ingest_path, ingest_uploads
from db.models import EventKind, Flank, IdentityEvent, Image, Individual, Sighting
from db.session import open_catalogue
from db.storage import sha256_bytes

# --------------------------------------------------------------------------- helpers


def jpeg(seed: int, size: tuple[int, int] = (48, 32)) -> bytes:
    """A small JPEG whose bytes differ per seed."""
    w, h = size
    arr = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    PILImage.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def rgba_png(seed: int, size: tuple[int, int] = (64, 48)) -> tuple[bytes, np.ndarray]:
    """An RGBA PNG with an elliptical opaque 'animal'; returns bytes and the alpha."""
    w, h = size
    rng = np.random.default_rng(seed)
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    yy, xx = np.mgrid[:h, :w]
    alpha = ((((xx - w / 2) / (w / 3)) ** 2 + ((yy - h / 2) / (h / 3)) ** 2) <= 1).astype(np.uint8) * 255
    buf = io.BytesIO()
    PILImage.fromarray(np.dstack([rgb, alpha]), "RGBA").save(buf, format="PNG")
    return buf.getvalue(), alpha


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def blob_files(data_dir: Path) -> set[str]:
    return {p.relative_to(data_dir).as_posix() for kind in ("images", "thumbs", "masks")
            for p in (data_dir / kind).rglob("*") if p.is_file()}


def by_status(report) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for it in report.items:
        out.setdefault(it.status, []).append(it.name)
    return out


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


def images(cat) -> list[Image]:
    with cat.unit_of_work() as s:
        return list(s.scalars(select(Image).order_by(Image.id)))


def individual_names(cat) -> dict[int, str]:
    with cat.unit_of_work() as s:
        return dict(s.execute(select(Individual.id, Individual.name)).all())


# --------------------------------------------------------------------------- formats


def test_detect_format(tmp_path):
    write(tmp_path / "one.jpg", jpeg(1))
    write_csv(tmp_path / "m.csv", ["filename", "identity"], [])
    write_csv(tmp_path / "k" / "train.csv", ["filename", "ground_truth"], [])
    write_csv(tmp_path / "mf" / "manifest.csv", ["filename", "identity"], [])
    (tmp_path / "plain").mkdir()
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as zf:
        zf.writestr("x.jpg", jpeg(2))
    assert detect_format(tmp_path / "one.jpg") == "file"
    assert detect_format(tmp_path / "m.csv") == "manifest"
    assert detect_format(tmp_path / "k" / "train.csv") == "kaggle"
    assert detect_format(tmp_path / "k") == "kaggle"
    assert detect_format(tmp_path / "mf") == "manifest"
    assert detect_format(tmp_path / "plain") == "folder"
    assert detect_format(tmp_path / "a.zip") == "zip"
    assert set(FORMATS) == {"file", "folder", "zip", "manifest", "kaggle", "camtrap-dp"}
    with pytest.raises(FileNotFoundError):
        detect_format(tmp_path / "missing")


def test_single_file_stored_content_addressed(cat, tmp_path):
    data = jpeg(1)
    p = write(tmp_path / "IMG_0001.JPG", data)
    report = ingest_path(cat, p, user="ana")
    assert report.counts["imported"] == 1 and report.format == "file"
    [img] = images(cat)
    assert img.content_hash == sha256_bytes(data)
    assert img.original_name == "IMG_0001.JPG"
    assert (img.width, img.height, img.format, img.mode) == (48, 32, "JPEG", "RGB")
    assert img.size_bytes == len(data)
    assert img.individual_id is None and img.flank == Flank.unknown
    assert cat.blobs.read(img.blob_path) == data
    assert img.blob_path.startswith("images/") and img.blob_path.endswith(".jpg")
    thumb = PILImage.open(cat.blobs.path(img.thumb_path))
    assert thumb.format == "JPEG" and thumb.size == (48, 32)
    assert report.items[0].image_id == img.id


def test_flat_folder(cat, tmp_path):
    for i in range(3):
        write(tmp_path / "photos" / f"p{i}.jpg", jpeg(10 + i))
    report = ingest_path(cat, tmp_path / "photos", user="ana")
    assert report.counts["imported"] == 3
    assert {i.original_name for i in images(cat)} == {"p0.jpg", "p1.jpg", "p2.jpg"}
    assert individual_names(cat) == {}


def test_folder_per_identity_records_history(cat, tmp_path):
    root = tmp_path / "cats"
    write(root / "Ousado" / "a.jpg", jpeg(1))
    write(root / "Ousado" / "b.jpg", jpeg(2))
    write(root / "Marcela" / "sub" / "c.jpg", jpeg(3))
    write(root / "loose.jpg", jpeg(4))
    report = ingest_path(cat, root, format="folder", user="ana")
    assert report.counts["imported"] == 4
    names = individual_names(cat)
    assert sorted(names.values()) == ["Marcela", "Ousado"]
    got = {i.original_name: (names.get(i.individual_id)) for i in images(cat)}
    assert got == {"Ousado/a.jpg": "Ousado", "Ousado/b.jpg": "Ousado", "Marcela/sub/c.jpg": "Marcela", "loose.jpg": None}
    with cat.unit_of_work() as s:
        events = list(s.scalars(select(IdentityEvent)))
    assigns = [e for e in events if e.kind == EventKind.assign]
    assert len([e for e in events if e.kind == EventKind.create]) == 2
    assert len(assigns) == 3 and all(e.user == "ana" and e.payload.get("via") == "import" for e in assigns)


def test_import_assignment_can_be_undone_like_any_other(cat, tmp_path):
    from db.catalogue import history, undo_event

    write(tmp_path / "cats" / "Ayo" / "1.jpg", jpeg(1))
    ingest_path(cat, tmp_path / "cats", user="ana")
    with cat.unit_of_work() as s:
        ev = next(e for e in history(s) if e.kind == EventKind.assign)
        assert ev.payload["image_id"] == images(cat)[0].id and ev.payload["previous"] is None
        undo_event(s, ev.id, user="bo")
        s.commit()
    assert images(cat)[0].individual_id is None


def test_zip_with_wrapper_folder_and_identities(cat, tmp_path):
    z = tmp_path / "upload.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("export/A/1.jpg", jpeg(1))
        zf.writestr("export/A/2.jpg", jpeg(2))
        zf.writestr("export/B/3.jpg", jpeg(3))
        zf.writestr("export/.DS_Store", b"junk")
        zf.writestr("__MACOSX/export/A/._1.jpg", b"junk")
    report = ingest_path(cat, z, user="ana", layout="individuals")  # a zip's folders are individuals only if asked
    assert report.format == "zip (folder)"
    assert report.counts["imported"] == 3 and report.counts["error"] == 0
    names = individual_names(cat)
    assert sorted(names[i.individual_id] for i in images(cat)) == ["A", "A", "B"]


def test_zip_path_traversal_refused_good_members_imported(cat, tmp_path, data_dir):
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("good.jpg", jpeg(1))
        zf.writestr("../escape.jpg", jpeg(2))
        zf.writestr("/etc/abs.jpg", jpeg(3))
        zf.writestr("a/../../deep.jpg", jpeg(4))
    report = ingest_path(cat, z, user="ana")
    st = by_status(report)
    assert st["imported"] == ["good.jpg"]
    assert len(st["error"]) == 3
    assert all("unsafe path" in it.message for it in report.errors)
    assert not (tmp_path / "escape.jpg").exists() and not (tmp_path.parent / "escape.jpg").exists()
    assert len(images(cat)) == 1


def test_manifest_with_all_columns(cat, tmp_path):
    root = tmp_path / "survey"
    for i in range(4):
        write(root / "images" / f"p{i}.jpg", jpeg(20 + i))
    write_csv(root / "manifest.csv",
              ["filename", "identity", "flank", "sighting", "date", "lat", "lon", "camera", "observer", "notes"],
              [["p0.jpg", "Ti", "L", "enc1", "2024-05-01", "-16.5", "-56.7", "cam3", "ana", "x"],
               ["p1.jpg", "Ti", "Right", "enc1", "", "", "", "", "", ""],
               ["p2.jpg", "Bo", "front", "", "2024-05-02", "", "", "cam9", "", ""],
               ["p3.jpg", "", "", "", "", "", "", "", "", ""]])
    report = ingest_path(cat, root / "manifest.csv", user="ana")
    assert report.format == "manifest" and report.counts["imported"] == 4, report.rows()
    names = individual_names(cat)
    imgs = {i.original_name: i for i in images(cat)}
    assert names[imgs["p0.jpg"].individual_id] == "Ti" and imgs["p3.jpg"].individual_id is None
    assert imgs["p0.jpg"].flank == Flank.left and imgs["p1.jpg"].flank == Flank.right
    assert imgs["p2.jpg"].flank == Flank.front and imgs["p3.jpg"].flank == Flank.unknown
    assert imgs["p0.jpg"].flank_source == "manifest"
    with cat.unit_of_work() as s:
        sightings = {x.id: x for x in s.scalars(select(Sighting))}
    enc1 = sightings[imgs["p0.jpg"].sighting_id]
    assert imgs["p1.jpg"].sighting_id == enc1.id
    assert (enc1.key, enc1.date, enc1.lat, enc1.lon, enc1.camera, enc1.observer) == \
        ("enc1", "2024-05-01", -16.5, -56.7, "cam3", "ana")
    # no sighting label: one is made from date + camera
    assert sightings[imgs["p2.jpg"].sighting_id].camera == "cam9"
    assert imgs["p3.jpg"].sighting_id is None


def test_manifest_missing_columns_imports_nothing(cat, tmp_path):
    write(tmp_path / "a.jpg", jpeg(1))
    write_csv(tmp_path / "m.csv", ["file_path", "animal"], [["a.jpg", "X"]])
    report = ingest_path(cat, tmp_path / "m.csv", format="manifest", user="ana")
    assert len(report.items) == 1 and report.items[0].status == "error"
    msg = report.items[0].message
    assert "'filename'" in msg and "missing" in msg
    assert "'identity'" not in msg.split("(found")[0]  # identity is optional: only filename is missing
    assert images(cat) == [] and report.exit_code == 1


def test_manifest_unknown_files_and_bad_rows_are_per_row(cat, tmp_path):
    write(tmp_path / "a.jpg", jpeg(1))
    write(tmp_path / "b.jpg", jpeg(2))
    write(tmp_path.parent / "outside.jpg", jpeg(3))
    write_csv(tmp_path / "m.csv", ["filename", "identity", "flank", "lat"],
              [["a.jpg", "X", "left", ""], ["ghost.jpg", "X", "left", ""], ["b.jpg", "Y", "sideways", ""],
               ["../outside.jpg", "Z", "", ""], ["a.jpg", "X", "left", "95"]])
    report = ingest_path(cat, tmp_path / "m.csv", user="ana")
    st = by_status(report)
    assert st["imported"] == ["a.jpg"]
    msgs = {it.name: it.message for it in report.errors}
    assert "not found" in msgs["ghost.jpg"]
    assert "unknown flank 'sideways'" in msgs["b.jpg"]
    assert "refused" in msgs["../outside.jpg"]
    assert any("latitude '95'" in m for _, status, m in report.rows() if status == "error")
    assert len(images(cat)) == 1 and report.exit_code == 0


def test_kaggle_layout_keeps_alpha_masks(cat, tmp_path):
    root = tmp_path / "jaguar"
    alphas = {}
    for i, ident in enumerate(["jag_a", "jag_a", "jag_b"]):
        data, alphas[f"t{i}.png"] = rgba_png(i)
        write(root / "train" / f"t{i}.png", data)
    for i in range(2):
        data, alphas[f"q{i}.png"] = rgba_png(100 + i)
        write(root / "test" / f"q{i}.png", data)
    write_csv(root / "train.csv", ["filename", "ground_truth"], [["t0.png", "jag_a"], ["t1.png", "jag_a"], ["t2.png", "jag_b"]])
    write_csv(root / "test.csv", ["row_id", "query_image", "gallery_image"],
              [[0, "q0.png", "t0.png"], [1, "q0.png", "q1.png"]])
    report = ingest_path(cat, root, user="ana")
    assert report.format == "kaggle"
    assert report.counts["imported"] == 5, report.rows()
    names = individual_names(cat)
    for img in images(cat):
        base = Path(img.original_name).name
        assert img.mode == "RGBA" and img.mask_source == "alpha"
        assert img.mask_path and img.mask_path.startswith("masks/")
        mask = decode_mask_png(cat.blobs.read(img.mask_path))
        assert np.array_equal(mask, alphas[base] > 127)
        assert 0.9 < img.solidity <= 1.0 and img.mask_flags == []
        assert names.get(img.individual_id) == {"t0.png": "jag_a", "t1.png": "jag_a", "t2.png": "jag_b"}.get(base)


def test_kaggle_train_csv_missing_ground_truth(cat, tmp_path):
    write(tmp_path / "a.png", rgba_png(1)[0])
    write_csv(tmp_path / "train.csv", ["filename", "label"], [["a.png", "x"]])
    report = ingest_path(cat, tmp_path / "train.csv", format="kaggle", user="ana")
    assert report.counts["error"] == 1 and "'ground_truth'" in report.items[0].message
    assert images(cat) == []


# --------------------------------------------------------------------------- bad input in one batch


def test_bad_files_reported_good_files_imported(cat, tmp_path, data_dir):
    root = tmp_path / "batch"
    good = jpeg(1)
    write(root / "good1.jpg", good)
    write(root / "good2.png", rgba_png(5)[0])
    write(root / "truncated.jpg", jpeg(2, size=(200, 200))[:900])
    write(root / "text.jpg", b"this is not a photo at all\n" * 10)
    write(root / "bomb.png", bomb_png())
    write(root / "empty.jpg", b"")
    write(root / "readme.txt", b"notes")
    report = ingest_path(cat, root, user="ana")
    st = by_status(report)
    assert sorted(st["imported"]) == ["good1.jpg", "good2.png"]
    assert st["skipped"] == ["readme.txt"]
    msgs = {it.name: it.message for it in report.errors}
    assert set(msgs) == {"truncated.jpg", "text.jpg", "bomb.png", "empty.jpg"}
    assert "damaged" in msgs["truncated.jpg"] or "incomplete" in msgs["truncated.jpg"]
    assert "not a picture" in msgs["text.jpg"]
    assert "decompression bomb" in msgs["bomb.png"]
    assert "empty" in msgs["empty.jpg"]
    assert len(images(cat)) == 2
    # two images: their blobs + thumbs + one mask, nothing for the failures
    assert len(blob_files(data_dir)) == 5
    assert report.exit_code == 0


def test_max_pixels_passed_through(cat, tmp_path):
    p = write(tmp_path / "a.jpg", jpeg(1, size=(100, 100)))
    report = ingest_path(cat, p, user="ana", max_pixels=5_000)
    assert report.items[0].status == "error" and "safety limit" in report.items[0].message
    assert report.exit_code == 1


def test_symlink_outside_folder_not_followed(cat, tmp_path):
    secret = write(tmp_path / "elsewhere" / "secret.jpg", jpeg(9))
    root = tmp_path / "photos"
    write(root / "ok.jpg", jpeg(1))
    try:
        os.symlink(secret, root / "link.jpg")
        os.symlink(tmp_path / "elsewhere", root / "linkdir")
    except (OSError, NotImplementedError):
        pytest.skip("symlinks not available")
    report = ingest_path(cat, root, user="ana")
    st = by_status(report)
    assert st["imported"] == ["ok.jpg"]
    assert "link.jpg" in st["error"] and "linkdir" in st["skipped"]
    assert [i.content_hash for i in images(cat)] == [sha256_bytes(jpeg(1))]


# --------------------------------------------------------------------------- duplicates, updates, idempotence


def test_rerun_is_idempotent(cat, tmp_path, data_dir):
    root = tmp_path / "cats"
    for i in range(3):
        write(root / "A" / f"{i}.jpg", jpeg(i))
    first = ingest_path(cat, root, user="ana")
    files_after_first = blob_files(data_dir)
    with cat.unit_of_work() as s:
        n_events = s.scalar(select(func.count(IdentityEvent.id)))
    second = ingest_path(cat, root, user="ana")
    assert first.counts["imported"] == 3
    assert second.counts["imported"] == 0 and second.counts["duplicate"] == 3
    assert all(it.image_id is not None for it in second.items)
    assert len(images(cat)) == 3 and blob_files(data_dir) == files_after_first
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(IdentityEvent.id))) == n_events


def test_same_bytes_under_two_names(cat, tmp_path):
    data = jpeg(1)
    write(tmp_path / "d" / "first.jpg", data)
    write(tmp_path / "d" / "second.jpg", data)
    report = ingest_path(cat, tmp_path / "d", user="ana")
    st = by_status(report)
    assert st == {"imported": ["first.jpg"], "duplicate": ["second.jpg"]}
    dup = report.items[1]
    assert dup.same_as == "first.jpg" and dup.needs_attention and dup.image_id == report.items[0].image_id
    assert len(images(cat)) == 1


def test_manifest_fills_in_missing_facts_and_reports_conflicts(cat, tmp_path):
    root = tmp_path / "d"
    write(root / "a.jpg", jpeg(1))
    write(root / "b.jpg", jpeg(2))
    ingest_path(cat, root, format="folder", user="ana")  # flat: no identities, no flanks
    write_csv(root / "manifest.csv", ["filename", "identity", "flank", "sighting"],
              [["a.jpg", "Tico", "left", "s1"], ["b.jpg", "Bela", "", ""]])
    report = ingest_path(cat, root / "manifest.csv", user="bo")
    assert report.counts["updated"] == 2 and report.counts["imported"] == 0
    names = individual_names(cat)
    imgs = {i.original_name: i for i in images(cat)}
    assert names[imgs["a.jpg"].individual_id] == "Tico" and imgs["a.jpg"].flank == Flank.left
    assert imgs["a.jpg"].sighting_id is not None
    assert names[imgs["b.jpg"].individual_id] == "Bela"
    # a manifest now contradicting the catalogue changes nothing and says so
    write_csv(root / "manifest.csv", ["filename", "identity", "flank"], [["a.jpg", "Other", "right"]])
    again = ingest_path(cat, root / "manifest.csv", user="bo")
    assert again.items[0].status == "duplicate"
    assert "'Tico'" in again.items[0].message and "not changed" in again.items[0].message
    imgs = {i.original_name: i for i in images(cat)}
    assert names[imgs["a.jpg"].individual_id] == "Tico" and imgs["a.jpg"].flank == Flank.left


def test_reimport_reports_new_metadata_and_updates_it_only_when_asked(cat, tmp_path):
    """Issue 14, item 6: importing a manifest again with date, place or camera for photos already catalogued said
    "duplicate" and dropped the new facts. Now the difference is reported; with update_metadata it is applied to
    the photo's sighting as an audited change, and the CLI takes --update-metadata."""
    from db.audit import audit_rows

    root = tmp_path / "d"
    write(root / "a.jpg", jpeg(1))
    header = ["filename", "identity", "sighting", "date", "place", "camera", "observer"]
    write_csv(root / "manifest.csv", header, [["a.jpg", "Tico", "s1", "2024-05-01", "Porto Jofre", "", ""]])
    ingest_path(cat, root / "manifest.csv", user="ana")
    write_csv(root / "manifest.csv", header,
              [["a.jpg", "Tico", "s1", "2024-05-02", "Porto Jofre", "CAM-7", "Rita"]])
    told = ingest_path(cat, root / "manifest.csv", user="bo")
    item = told.items[0]
    assert item.status == "duplicate" and "the import has other metadata" in item.message
    assert "date '2024-05-01' -> '2024-05-02'" in item.message and "camera (none) -> 'CAM-7'" in item.message
    with cat.unit_of_work() as s:
        sg = s.scalar(select(Sighting).where(Sighting.key == "s1"))
        assert (sg.date, sg.camera, sg.observer) == ("2024-05-01", None, None)  # reported, not applied

    updated = ingest_path(cat, root / "manifest.csv", user="bo", update_metadata=True)
    assert updated.items[0].status == "updated" and "metadata of sighting s1" in updated.items[0].message
    with cat.unit_of_work() as s:
        sg = s.scalar(select(Sighting).where(Sighting.key == "s1"))
        assert (sg.date, sg.place, sg.camera, sg.observer) == ("2024-05-02", "Porto Jofre", "CAM-7", "Rita")
    rows = audit_rows(cat, action="sighting.metadata")
    assert [(r.user, r.target) for r in rows] == [("bo", "sighting#1")]
    assert rows[0].details == {"date": ["2024-05-01", "2024-05-02"], "camera": [None, "CAM-7"], "observer": [None, "Rita"]}
    # the same manifest again: nothing differs, a plain duplicate
    assert ingest_path(cat, root / "manifest.csv", user="bo", update_metadata=True).items[0].status == "duplicate"
    # the shell: --update-metadata
    write_csv(root / "manifest.csv", header, [["a.jpg", "Tico", "s1", "2024-05-02", "Porto Jofre", "CAM-9", "Rita"]])
    assert cli_main(["--data-dir", str(cat.data_dir), "--user", "cy", "import", str(root / "manifest.csv"),
                     "--update-metadata"]) == 0
    with cat.unit_of_work() as s:
        assert s.scalar(select(Sighting.camera).where(Sighting.key == "s1")) == "CAM-9"
        image_id, individual_id = s.execute(select(Image.id, Image.individual_id)).one()
    # camera and observer are shown in the Catalogue's sightings and in Match review's facts
    from jobs.actions import catalogue as services
    from jobs.actions import match as match_services

    assert services.open_individual(cat, individual_id).sightings == [["s1", "2024-05-02", "Porto Jofre", "CAM-9", "Rita", 1]]
    facts = dict(match_services.query_photo(cat, image_id).facts())
    assert facts["Camera"] == "CAM-9" and facts["Observer"] == "Rita"


def test_dry_run_writes_nothing(cat, tmp_path, data_dir):
    write(tmp_path / "seed.jpg", jpeg(99))
    ingest_path(cat, tmp_path / "seed.jpg", user="ana")
    before_files = blob_files(data_dir)
    with cat.unit_of_work() as s:
        before = catalogue_stats(s)
        before_events = s.scalar(select(func.count(IdentityEvent.id)))
    root = tmp_path / "cats"
    write(root / "A" / "1.jpg", jpeg(1))
    write(root / "A" / "2.jpg", jpeg(1))  # same bytes
    write(root / "B" / "3.png", rgba_png(3)[0])
    write(root / "B" / "bad.jpg", b"nope")
    write(root / "B" / "seed-again.jpg", jpeg(99))
    report = ingest_path(cat, root, user="ana", dry_run=True)
    st = by_status(report)
    assert sorted(st["would-import"]) == ["A/1.jpg", "B/3.png"]
    assert sorted(st["duplicate"]) == ["A/2.jpg"] and st["would-update"] == ["B/seed-again.jpg"]
    assert st["error"] == ["B/bad.jpg"]
    assert "new individual" in report.items[0].message
    assert blob_files(data_dir) == before_files
    with cat.unit_of_work() as s:
        assert catalogue_stats(s) == before
        assert s.scalar(select(func.count(IdentityEvent.id))) == before_events
    assert "dry run" in report.summary()


def test_failure_after_blob_write_leaves_nothing(cat, tmp_path, data_dir, monkeypatch):
    root = tmp_path / "d"
    write(root / "A" / "ok.jpg", jpeg(1))
    write(root / "B" / "boom.png", rgba_png(2)[0])
    write(root / "C" / "ok2.jpg", jpeg(3))
    original = ingest_mod._Importer._before_commit

    def failing(self, session, img):
        if img.original_name.endswith("boom.png"):
            assert blob_files(data_dir)  # the blobs were really written before the failure
            raise RuntimeError("disk on fire")
        return original(self, session, img)

    monkeypatch.setattr(ingest_mod._Importer, "_before_commit", failing)
    report = ingest_path(cat, root, user="ana")
    st = by_status(report)
    assert sorted(st["imported"]) == ["A/ok.jpg", "C/ok2.jpg"] and st["error"] == ["B/boom.png"]
    assert "disk on fire" in report.errors[0].message
    kept = images(cat)
    assert len(kept) == 2
    expected = {p for img in kept for p in (img.blob_path, img.thumb_path)}
    assert blob_files(data_dir) == expected  # no orphan image, thumbnail or mask
    assert sorted(individual_names(cat).values()) == ["A", "C"]  # B's creation rolled back with its file
    # and it imports cleanly once the problem is gone
    monkeypatch.setattr(ingest_mod._Importer, "_before_commit", original)
    assert ingest_path(cat, root, user="ana").counts["imported"] == 1


def test_progress_callback(cat, tmp_path):
    for i in range(5):
        write(tmp_path / "d" / f"{i}.jpg", jpeg(i))
    seen: list[tuple[int, int]] = []
    ingest_path(cat, tmp_path / "d", user="ana", progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i, 5) for i in range(1, 6)]


# --------------------------------------------------------------------------- uploads (UI)


def test_ingest_uploads_with_manifest(cat, tmp_path):
    up = tmp_path / "gradio" / "x"
    a = write(up / "IMG_1.jpg", jpeg(1))
    b = write(up / "IMG_2.jpg", jpeg(2))
    z = up / "more.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("IMG_3.jpg", jpeg(3))
        zf.writestr("../bad.jpg", jpeg(4))
    m = write_csv(tmp_path / "m.csv", ["filename", "identity", "flank"],
                  [["IMG_1.jpg", "Luna", "R"], ["IMG_3.jpg", "Sol", "L"], ["IMG_9.jpg", "Luna", ""]])
    report = ingest_uploads(cat, [a, b, z], manifest=m, user="web")
    st = by_status(report)
    assert sorted(st["imported"]) == ["IMG_1.jpg", "IMG_2.jpg", "more.zip/IMG_3.jpg"]
    assert sorted(st["error"]) == ["IMG_9.jpg", "more.zip/../bad.jpg"]
    names = individual_names(cat)
    got = {Path(i.original_name).name: (names.get(i.individual_id), i.flank) for i in images(cat)}
    assert got == {"IMG_1.jpg": ("Luna", Flank.right), "IMG_2.jpg": (None, Flank.unknown), "IMG_3.jpg": ("Sol", Flank.left)}


def test_upload_manifest_blank_cells_keep_zip_identity(cat, tmp_path):
    z = tmp_path / "up" / "cats.zip"
    z.parent.mkdir()
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("Nala/x.jpg", jpeg(1))
        zf.writestr("Nala/y.jpg", jpeg(2))
        zf.writestr("Kito/z.jpg", jpeg(3))
    m = write_csv(tmp_path / "m.csv", ["filename", "identity", "flank"], [["x.jpg", "", "L"], ["y.jpg", "", "up"]])
    report = ingest_uploads(cat, [z], manifest=m, user="web", folders="individuals")
    st = by_status(report)
    assert st == {"imported": ["cats.zip/Kito/z.jpg", "cats.zip/Nala/x.jpg"], "error": ["cats.zip/Nala/y.jpg"]}
    assert "unknown flank 'up'" in report.errors[0].message
    imgs = {Path(i.original_name).name: i for i in images(cat)}
    assert individual_names(cat)[imgs["x.jpg"].individual_id] == "Nala" and imgs["x.jpg"].flank == Flank.left


def test_zip_single_wrapper_folder_is_not_an_identity(cat, tmp_path):
    z = tmp_path / "photos.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("photos/a.jpg", jpeg(1))
        zf.writestr("photos/b.jpg", jpeg(2))
    report = ingest_path(cat, z, user="ana")
    assert [it.name for it in report.items] == ["a.jpg", "b.jpg"]
    assert individual_names(cat) == {}


# --------------------------------------------------------------------------- CLI


def test_cli_import_table_exit_codes_and_stats(tmp_path, capsys):
    d = tmp_path / "home"
    root = tmp_path / "cats"
    write(root / "A" / "1.jpg", jpeg(1))
    write(root / "A" / "broken.jpg", b"\xff\xd8\xff garbage")
    assert cli_main(["--data-dir", str(d), "--user", "ana", "import", str(root)]) == 0
    out = capsys.readouterr().out
    assert "A/broken.jpg" in out and "error" in out and "1 imported" in out
    # everything failing gives exit code 1
    write(tmp_path / "bad" / "x.jpg", b"")
    assert cli_main(["--data-dir", str(d), "import", str(tmp_path / "bad")]) == 1
    capsys.readouterr()
    assert cli_main(["--data-dir", str(d), "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["images"] == 1 and stats["individuals"] == 1
    # a path that does not exist is a clean error, not a traceback
    assert cli_main(["--data-dir", str(d), "import", str(tmp_path / "nope")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_cli_dry_run(tmp_path, capsys):
    d = tmp_path / "home"
    write(tmp_path / "p" / "1.jpg", jpeg(1))
    assert cli_main(["--data-dir", str(d), "import", "--dry-run", str(tmp_path / "p")]) == 0
    assert "would-import" in capsys.readouterr().out
    assert not (d / "images").exists()


# --------------------------------------------------------------------------- the nyala set (slow, shared)


@pytest.fixture(scope="module")
def nyala_imported(tmp_path_factory, nyala_dir):
    d = tmp_path_factory.mktemp("nyala-home")
    c = open_catalogue(d)
    first = ingest_path(c, nyala_dir / "manifest.csv", user="loader")
    second = ingest_path(c, nyala_dir / "manifest.csv", user="loader")
    yield d, c, first, second
    c.close()


def _distinct_files(nyala_dir, manifest) -> int:
    import hashlib

    return len({hashlib.sha256((nyala_dir / "images" / r["filename"]).read_bytes()).hexdigest() for r in manifest})


@pytest.mark.slow
def test_nyala_manifest_full_import(nyala_imported, nyala_manifest, nyala_dir):
    _, cat, first, _ = nyala_imported
    distinct = _distinct_files(nyala_dir, nyala_manifest)  # byte-identical files become one image
    assert len(first.items) == len(nyala_manifest)
    assert first.errors == []
    assert first.counts["imported"] == distinct and first.counts["duplicate"] == len(nyala_manifest) - distinct
    if len(nyala_manifest) == 1213:  # the shared set: eight files of nyala_218 are byte-identical copies
        assert distinct == 1205
    assert all(it.same_as is not None for it in first.items if it.status == "duplicate")
    with cat.unit_of_work() as s:
        assert s.scalar(select(func.count(Image.id))) == distinct
        assert s.scalar(select(func.count(Image.id)).where(Image.flank == Flank.unknown)) == 0
        assert s.scalar(select(func.count(Image.id)).where(Image.individual_id.is_(None))) == 0
        rows = s.execute(select(Image.original_name, Individual.name, Image.flank)
                         .join(Individual, Image.individual_id == Individual.id)).all()
    truth = {r["filename"]: (r["identity"], r["flank"]) for r in nyala_manifest}
    assert all(truth[name] == (ident, flank.value) for name, ident, flank in rows)
    with cat.unit_of_work() as s:
        assert catalogue_stats(s)["individuals"] == len({r["identity"] for r in nyala_manifest})
        assert catalogue_stats(s)["sightings"] == len({r["sighting"] for r in nyala_manifest})


@pytest.mark.slow
def test_nyala_second_run_imports_nothing_and_stats_cli(nyala_imported, nyala_manifest, nyala_dir, capsys):
    d, _, _, second = nyala_imported
    assert second.counts["imported"] == 0 and second.counts["updated"] == 0
    assert second.counts["duplicate"] == len(nyala_manifest) and second.errors == []
    assert cli_main(["--data-dir", str(d), "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["images"] == _distinct_files(nyala_dir, nyala_manifest)
    assert stats["individuals"] == len({r["identity"] for r in nyala_manifest})
    assert stats["sightings"] == len({r["sighting"] for r in nyala_manifest})
    if len(nyala_manifest) == 1213:  # the shared set, as counted by hand once
        assert (stats["images"], stats["individuals"], stats["sightings"]) == (1205, 179, 617)


def test_stopped_import_keeps_what_it_did_and_resumes(cat, tmp_path):
    for i in range(6):
        write(tmp_path / "photos" / f"p{i}.jpg", jpeg(30 + i))
    done: list[int] = []
    report = ingest_path(cat, tmp_path / "photos", user="ana", progress=lambda d, t: done.append(d),
                         should_cancel=lambda: len(done) >= 2)
    st = by_status(report)
    assert len(st["imported"]) == 2 and len(st["skipped"]) == 4
    assert all("stopped by the curator" in it.message for it in report.items if it.status == "skipped")
    assert len(images(cat)) == 2  # the two finished files are committed, nothing half-written
    again = ingest_path(cat, tmp_path / "photos", user="ana")
    assert again.counts["imported"] == 4 and again.counts["duplicate"] == 2
    assert len(images(cat)) == 6


def test_stop_button_flags_are_per_session(cat, tmp_path):
    from jobs.actions import ingest as services
    from jobs.requests.ingest import ImportUploadsRequest

    stops = services.StopRequests()
    mine, theirs = stops.checker("s1"), stops.checker("s2")
    stops.request("s1")
    assert mine() and not theirs()
    stops.clear("s1")
    assert not mine()
    paths = [str(write(tmp_path / "up" / f"u{i}.jpg", jpeg(60 + i))) for i in range(3)]
    outcome = services.import_uploads(cat, ImportUploadsRequest(paths, user="ana"), should_cancel=lambda: True)
    assert outcome.counts["imported"] == 1 and outcome.counts["skipped"] == 2
