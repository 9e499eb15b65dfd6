"""End to end in a real browser: a Kaggle submission written by a background job and offered for download, and a
Camtrap DP package written from the catalogue by a background job and offered as a zip, the people in its photos
blurred (or, chosen in the tab, the photos showing them left out); the Kaggle block sits below it."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import numpy as np
import pytest
from PIL import Image

from tests.browser.conftest import require_chromium, start_rosette
from tests.browser.test_ingest_catalogue import TIMEOUT_MS, upload
from tests.test_camtrapdp_export import build_catalogue


def test_kaggle_export_from_the_export_tab(rosette_server, page, shot, tmp_path):
    from playwright.sync_api import expect

    rng = np.random.default_rng(1)
    names = [f"jaguar_{i}.png" for i in range(3)]
    with zipfile.ZipFile(tmp_path / "images.zip", "w") as zf:
        for n in names:
            arr = rng.integers(0, 255, size=(48, 64, 4), dtype=np.uint8)
            arr[..., 3] = 255
            Image.fromarray(arr).save(tmp_path / n)
            zf.write(tmp_path / n, arcname=n)
    with open(tmp_path / "test.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["row_id", "query_image", "gallery_image"])
        w.writerows([[f"q{i}", a, b] for i, (a, b) in enumerate((a, b) for a in names for b in names)])

    page.goto(rosette_server.url)
    page.get_by_role("tab", name="Export").click()
    upload(page, "export-test-csv", [str(tmp_path / "test.csv")])
    upload(page, "export-images-zip", [str(tmp_path / "images.zip")])
    page.locator("#export-run").click()
    expect(page.locator("#export-status")).to_contain_text("Done: 9 rows", timeout=120_000)
    link = page.locator('#export-result a[href$="submission.csv"]')
    expect(link).to_have_count(1, timeout=TIMEOUT_MS)
    shot("export-done")
    body = page.request.get(link.get_attribute("href") if link.get_attribute("href").startswith("http")
                            else rosette_server.url.rstrip("/") + link.get_attribute("href")).text()
    rows = list(csv.DictReader(body.splitlines()))
    assert [r["row_id"] for r in rows] == [f"q{i}" for i in range(9)]
    same = [float(r["similarity"]) for r, (a, b) in zip(rows, ((a, b) for a in names for b in names)) if a == b]
    assert all(abs(s - 1.0) < 1e-4 for s in same)
    # the download survives a page reload
    page.reload()
    page.get_by_role("tab", name="Export").click()
    expect(page.locator("#export-status")).to_contain_text("Done: 9 rows", timeout=30_000)
    expect(page.locator('#export-result a[href$="submission.csv"]')).to_have_count(1, timeout=TIMEOUT_MS)


@pytest.fixture(scope="module")
def camtrap_server(tmp_path_factory):
    """A catalogue with a located deployment, photos, an import's identities and curators' decisions (the one
    tests/test_camtrapdp_export.py builds), served."""
    require_chromium()
    made = build_catalogue(tmp_path_factory.mktemp("camtrap-browser"))
    made.cat.close()
    server = start_rosette(made.root / "data")
    server.photos = made.photos  # the originals, to compare with what the package holds
    try:
        yield server
    finally:
        server.stop()


JOB_TIMEOUT_MS = 120_000  # the worker's child process starts, then writes the package


def _package(page, server) -> zipfile.ZipFile:
    from playwright.sync_api import expect

    link = page.locator('#camtrap-result a[href$=".zip"]')
    expect(link).to_have_count(1, timeout=TIMEOUT_MS)
    href = link.get_attribute("href")
    body = page.request.get(href if href.startswith("http") else server.url.rstrip("/") + href).body()
    return zipfile.ZipFile(io.BytesIO(body))


def test_camtrap_dp_package_from_the_export_tab(camtrap_server, page, shot):
    from playwright.sync_api import expect

    page.goto(camtrap_server.url)
    page.get_by_role("tab", name="Export").click()
    # the field formats come first, the Kaggle submission below them
    camtrap_box, kaggle_box = page.locator("#camtrap-run").bounding_box(), page.locator("#export-run").bounding_box()
    assert camtrap_box["y"] < kaggle_box["y"]
    expect(page.locator("#camtrap-people input[value='blur']")).to_be_checked()
    page.locator("#camtrap-title input, #camtrap-title textarea").first.fill("Nyala waterholes")
    page.locator("#camtrap-run").click()
    status = page.locator("#camtrap-status")
    expect(status).to_contain_text("Valid Camtrap DP package: 1 deployment(s), 6 photo(s)", timeout=JOB_TIMEOUT_MS)
    expect(status).to_contain_text("(1 of people)")
    expect(status).to_contain_text("1 photo(s) showing people copied with the people blurred")
    expect(status).to_contain_text("Left out: 1 photo(s) without a deployment")
    shot("camtrap-dp-done")
    with _package(page, camtrap_server) as zf:
        descriptor = json.loads(zf.read("datapackage.json"))
        observations = list(csv.DictReader(io.StringIO(zf.read("observations.csv").decode())))
        media = {m["fileName"]: m for m in csv.DictReader(io.StringIO(zf.read("media.csv").decode()))}
        exported = np.asarray(Image.open(io.BytesIO(zf.read(media["p5.jpg"]["filePath"]))).convert("RGB"), np.int16)
    assert descriptor["title"] == "Nyala waterholes"
    assert {o["individualID"] for o in observations} == {"Ayla", ""}
    original = np.asarray(Image.open(camtrap_server.photos / "p5.jpg").convert("RGB"), np.int16)
    h, w = original.shape[:2]  # p5's person box: x 0.6, y 0.1, w 0.2, h 0.5
    person = (slice(round(0.1 * h), round(0.6 * h)), slice(round(0.6 * w), round(0.8 * w)))
    assert np.abs(exported[person] - original[person]).mean() > 20  # the person's pixels differ from the original

    # chosen in the tab: the photos showing people are left out
    page.locator("#camtrap-people label", has_text="Leave out the photos showing people").click()
    page.locator("#camtrap-run").click()
    expect(status).to_contain_text("1 photo(s) showing people left out (people: omit)", timeout=JOB_TIMEOUT_MS)
    expect(status).to_contain_text("5 photo(s)")
    with _package(page, camtrap_server) as zf:
        media = {m["fileName"] for m in csv.DictReader(io.StringIO(zf.read("media.csv").decode()))}
    assert "p5.jpg" not in media and len(media) == 5
    assert page.external_requests == []
