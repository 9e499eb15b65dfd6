"""In a real browser: a zip of station folders as camera traps store them, with MegaDetector output. The upload box
says what it holds, the Ingest tab previews the folders as stations matching their deployments, the species is
set, and the report counts what came in in the tab's own words; a second import shows its report from the top."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
from PIL import Image as PILImage
from sqlalchemy import select

from core.field.stations import deployment_spec
from db.records.deployments import store_deployments
from db.models import Image, Individual, Photo, Species
from db.session import open_catalogue
from tests.browser.test_ingest_catalogue import upload

TIMEOUT_MS = 30_000
STATIONS = ("FZ1", "FZ2", "FZ3")
FRAMES = 4  # per station: enough report rows for the table to scroll


def frame(seed: int) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    buf = io.BytesIO()
    exif = PILImage.Exif()
    exif[306] = "2024:05:03 10:00:00"
    PILImage.fromarray(arr).save(buf, format="JPEG", quality=90, exif=exif.tobytes())
    return buf.getvalue()


def season(tmp_path):
    """``season.zip`` (``season/<station>/IMG_<i>.jpg``) and its MegaDetector JSON: every frame one animal, but
    FZ3/IMG_0 empty and FZ3/IMG_1's only box outside the frame."""
    z = tmp_path / "season.zip"
    images = []
    with zipfile.ZipFile(z, "w") as zf:
        for n, st in enumerate(STATIONS):
            for i in range(FRAMES):
                zf.writestr(f"season/{st}/IMG_{i}.jpg", frame(500 + 10 * n + i))
                box = [0.1, 0.1, 0.5, 0.5]
                dets = [] if (st, i) == ("FZ3", 0) else [
                    {"category": "1", "conf": 0.9, "bbox": [0.7, 0.7, 0.6, 0.6] if (st, i) == ("FZ3", 1) else box}]
                images.append({"file": f"{st}/IMG_{i}.jpg", "detections": dets})
    md = tmp_path / "md.json"
    md.write_text(json.dumps({"info": {"format_version": "1.4", "detector": "md_v5a.0.0.pt"},
                              "detection_categories": {"1": "animal", "2": "person"}, "images": images}))
    return z, md


def _scrolled_to_top_js() -> str:
    return """() => [...document.querySelectorAll('#ingest-report *')]
        .filter(el => el.scrollHeight > el.clientHeight + 20).every(el => el.scrollTop === 0)"""


def test_station_folder_zip_preview_species_and_report(rosette_server, page, shot, tmp_path):
    from playwright.sync_api import expect

    cat = open_catalogue(rosette_server.data_dir)
    try:
        store_deployments(cat, [deployment_spec({
            "deploymentID": f"D-{st}", "locationID": st, "latitude": "-27.1", "longitude": "32.4",
            "deploymentStart": "2024-05-01T00:00:00+02:00", "deploymentEnd": "2024-05-30T23:59:59+02:00"})
            for st in STATIONS], user="seed")
    finally:
        cat.close()
    z, md = season(tmp_path)

    page.goto(rosette_server.url)
    expect(page.get_by_role("tab", name="Ingest")).to_be_visible(timeout=TIMEOUT_MS)
    upload(page, "ingest-files", [str(z)])
    expect(page.locator("#ingest-files-count")).to_contain_text("1 file in the upload box: 1 zip",
                                                                timeout=TIMEOUT_MS)
    preview = page.locator("#ingest-folders-preview")
    # the folders name stored stations: the tab says so and picks "stations" itself
    expect(preview).to_contain_text("3 station folders: FZ1 (4 photos), FZ2 (4 photos), FZ3 (4 photos)",
                                    timeout=TIMEOUT_MS)
    expect(preview).to_contain_text("Matching deployments: FZ1 → D-FZ1; FZ2 → D-FZ2; FZ3 → D-FZ3")
    folders = page.locator("#ingest-folders")
    expect(folders.get_by_label("camera stations", exact=False)).to_be_checked()
    # nothing, then stations again: the preview follows the choice
    folders.get_by_label("nothing", exact=False).check()
    expect(preview).to_contain_text("3 folders not read", timeout=TIMEOUT_MS)
    folders.get_by_label("camera stations", exact=False).check()
    expect(preview).to_contain_text("3 station folders", timeout=TIMEOUT_MS)
    page.locator("#ingest-species input, #ingest-species textarea").first.fill("Tragelaphus angasii")
    page.get_by_text("MegaDetector boxes (optional)").click()
    upload(page, "ingest-detections", [str(md)])
    shot("ingest-folders-preview")

    page.locator("#ingest-import").click()
    summary = page.locator("#ingest-summary")
    expect(summary).to_contain_text("11 imported", timeout=60_000)
    expect(summary).to_contain_text("11 photos, 11 animals, 0 people blurred, 0 boxes below 0.2, 1 box refused as "
                                    "invalid (each named below with its reason), 1 empty frame left out (tick "
                                    "\"keep empty frames\" to keep them)")
    assert "--keep-empty" not in summary.inner_text()
    report = page.locator("#ingest-report")
    expect(report).to_contain_text("not an empty frame")
    expect(report).to_contain_text('tick "keep empty frames" to keep empty frames')
    # the Details column wraps: the refused box's reason is read in full, not cut at the cell's edge
    wraps = report.locator(".body-cell").filter(has_text="lies outside the frame").first.evaluate("""cell => {
        const text = cell.querySelector('span') || cell;
        const line = parseFloat(getComputedStyle(text).lineHeight) || 20;
        return {white: getComputedStyle(text).whiteSpace, tall: text.getBoundingClientRect().height > 1.8 * line,
                cut: text.scrollWidth > text.clientWidth + 1}; }""")
    assert wraps["white"] != "nowrap" and wraps["tall"] and not wraps["cut"], wraps
    shot("ingest-folders-report")

    with open_catalogue(rosette_server.data_dir).unit_of_work() as s:
        assert s.scalar(select(Individual.id).where(Individual.name.in_(STATIONS))) is None
        linked = dict(s.execute(select(Photo.original_name, Photo.deployment_id).where(
            Photo.original_name.like("season.zip/%"))).all())
        assert len(linked) == 11 and all(linked.values())
        sp = s.scalar(select(Species.id).where(Species.name == "Tragelaphus angasii"))
        assert sp is not None and set(s.scalars(select(Image.species_id).join(Photo, Image.photo_id == Photo.id)
                                                .where(Photo.original_name.like("season.zip/%")))) == {sp}

    # scrolled down, a new import shows its report from the top
    scrolled = page.evaluate("""() => { let moved = false;
        document.querySelectorAll('#ingest-report *').forEach(el => {
          if (el.scrollHeight > el.clientHeight + 20) {
            el.scrollTop = el.scrollHeight; moved = moved || el.scrollTop > 0; }
        }); return moved; }""")
    assert scrolled, "the report table should be tall enough to scroll"
    page.locator("#ingest-import").click()
    expect(summary).to_contain_text("11 duplicate", timeout=60_000)
    page.wait_for_function(_scrolled_to_top_js(), timeout=TIMEOUT_MS)
