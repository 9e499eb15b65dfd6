"""Kaggle export from the UI: staging, validation, background job, download."""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from db.catalogue import CatalogueError
from db.session import open_catalogue
from jobs.actions import export as es
from jobs.requests.export import KaggleUploadRequest
from jobs.worker import run_one


def _submit(cat, **inputs):
    """The Export tab's inputs as a request, submitted."""
    return es.submit_kaggle_export(cat, KaggleUploadRequest(**inputs))


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


@pytest.fixture()
def kaggle(tmp_path):
    d = tmp_path / "k"
    (d / "images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = []
    for i in range(3):
        arr = rng.integers(0, 255, size=(40, 50, 4), dtype=np.uint8)
        arr[..., 3] = 255
        Image.fromarray(arr).save(d / "images" / f"j{i}.png")
        names.append(f"j{i}.png")
    with open(d / "test.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row_id", "query_image", "gallery_image"])
        for n, (q, g) in enumerate([(a, b) for a in names for b in names if a != b]):
            w.writerow([n, q, g])
    with zipfile.ZipFile(d / "images.zip", "w") as zf:
        for n in names:
            zf.write(d / "images" / n, arcname=f"train/{n}")
    return d


def test_export_from_a_zip_runs_as_a_job_and_returns_the_file(cat, kaggle):
    job_id, msg = _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=str(kaggle / "images.zip"),
                          images_dir=None, model="efficientnet_lite0")
    assert "6 pairs over 3 images" in msg
    text, path = es.export_status(cat, job_id)
    assert "queued" in text and path is None
    assert run_one(cat) == job_id
    text, path = es.export_status(cat, job_id)
    assert text.startswith("Done: 6 rows") and path and path.endswith("submission.csv")
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    assert [r["row_id"] for r in rows] == [str(i) for i in range(6)]
    assert all(-1.0 <= float(r["similarity"]) <= 1.0 for r in rows)


def test_export_refuses_bad_inputs_before_queueing(cat, kaggle, tmp_path):
    with pytest.raises(CatalogueError, match="test.csv"):
        _submit(cat, test_csv=None, images_zip=None, images_dir=str(kaggle / "images"), model="x")
    with pytest.raises(CatalogueError, match="Only folders inside the data directory"):
        _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=None,
                images_dir=str(tmp_path / "nowhere"), model="efficientnet_lite0")
    with pytest.raises(CatalogueError, match="Only folders inside the data directory"):  # no probing of /etc
        _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=None, images_dir="/etc",
                model="efficientnet_lite0")
    with pytest.raises(CatalogueError, match="no folder"):
        _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=None,
                images_dir=str(cat.data_dir / "nowhere"), model="efficientnet_lite0")
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../../escape.png", b"x")
    with pytest.raises(CatalogueError, match="unpacked inside the archive"):
        _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=str(evil), images_dir=None,
                model="efficientnet_lite0")
    assert not (tmp_path / "escape.png").exists()
    # a zip bomb: small on disk, huge unpacked -- refused at the cap, and the staged folder is removed
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(3):  # named by test.csv (members it does not name are never unpacked at all)
            zf.writestr(f"j{i}.png", b"\0" * (8 * 1024 * 1024))
    assert bomb.stat().st_size < 200_000
    orig = es.MAX_EXPORT_BYTES
    es.MAX_EXPORT_BYTES = 10 * 1024 * 1024
    try:
        with pytest.raises(CatalogueError, match="unpacks to more than 10 MB"):
            _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=str(bomb), images_dir=None,
                    model="efficientnet_lite0")
    finally:
        es.MAX_EXPORT_BYTES = orig
    staged = list((cat.data_dir / "exports").glob("*")) if (cat.data_dir / "exports").exists() else []
    assert staged == []  # failed stagings left nothing behind
    inside = cat.data_dir / "kaggle-images"
    import shutil

    shutil.copytree(kaggle / "images", inside)
    (inside / "j2.png").unlink()
    with pytest.raises(ValueError, match="j2.png"):
        _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=None,
                images_dir=str(inside), model="efficientnet_lite0")
    from jobs.queue import list_jobs

    assert list_jobs(cat) == []  # nothing was queued for bad input


def test_a_refused_upload_is_named_as_the_curator_knows_it(cat, kaggle, tmp_path):
    """Gradio keeps uploads in a temporary folder of the server: a refusal names the file, never that folder
    (issue 14, item 22)."""
    upload_dir = tmp_path / "gradio" / "3f9c0e1d2a7b"
    upload_dir.mkdir(parents=True)
    bad = upload_dir / "test.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(Exception) as info:
        _submit(cat, test_csv=str(bad), images_zip=str(kaggle / "images.zip"), images_dir=None,
                model="efficientnet_lite0")
    message = str(info.value)
    assert "test.csv, line 1: missing column(s) row_id" in message
    assert str(upload_dir) not in message and "gradio" not in message
    broken_zip = upload_dir / "images.zip"
    broken_zip.write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(Exception) as info:
        _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=str(broken_zip), images_dir=None,
                model="efficientnet_lite0")
    assert str(upload_dir) not in str(info.value)


def test_only_the_named_images_are_unpacked_and_removed_after_the_job(cat, kaggle, tmp_path):
    """A zip with large members test.csv does not name: they are never unpacked; the staged images are removed
    once the export job is over, the submission stays (issue 14, item 15)."""
    import shutil
    import zipfile

    big = tmp_path / "with-extras.zip"
    shutil.copy(kaggle / "images.zip", big)
    with zipfile.ZipFile(big, "a") as zf:
        zf.writestr("train/unnamed_huge.png", b"\0" * (4 * 1024 * 1024))
    job_id, _ = _submit(cat, test_csv=str(kaggle / "test.csv"), images_zip=str(big), images_dir=None,
                        model="efficientnet_lite0")
    staged = list((cat.data_dir / "exports").rglob("images"))
    assert len(staged) == 1 and sorted(p.name for p in staged[0].iterdir()) == sorted(
        p.name for p in (kaggle / "images").iterdir())
    assert run_one(cat) == job_id
    text, path = es.export_status(cat, job_id)
    assert text.startswith("Done") and Path(path).exists()
    assert not staged[0].exists()
