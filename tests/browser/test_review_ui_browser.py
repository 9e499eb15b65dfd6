"""End to end in a real browser: review and catalogue say which animal. A gallery of one named animal (Ana, two
photos) and a camera-trap frame holding two animals: Match review titles the query "animal #N, one of 2 in photo
pair.jpg", draws the whole frame with a legend, keeps the Whole frame label whole, offers a new individual after
"not the same" on the only candidate and ends the queue in one state with the decision buttons disabled; the Mask
picker tells the two animals apart; the Catalogue's captions stand under their pictures; the Deployments table
shows the camera model under headers that never break inside a word.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.browser.conftest import choose, require_chromium, shown_query_id, start_rosette
from tests.browser.test_annotations_browser import BOX_A, BOX_B, _two_animals
from tests.browser.test_match_review import wait_for
from tests.conftest import DEMO_DIR

TIMEOUT_MS = 60_000
CAMERA_MODEL = "Reconyx HyperFire 2"


def seed(data_dir: Path, work: Path) -> tuple[int, int]:
    """Ana (two photos), the two-animal frame with its MegaDetector JSON, one deployment with a camera model;
    returns the frame's two annotation ids (left, right)."""
    from PIL import Image as PILImage

    from core.annotations import Box, crop_rect
    from core.field.stations import deployment_spec
    from db.records.deployments import store_deployments
    from db.io.ingest import ingest_path
    from db.session import open_catalogue

    (ana, bia) = _two_animals()
    gallery, frames = work / "gallery", work / "frames"
    gallery.mkdir(parents=True)
    frames.mkdir(parents=True)
    lines = ["filename,identity,flank"]
    for f, flank in ana[:2]:
        (gallery / f).write_bytes((DEMO_DIR / "images" / f).read_bytes())
        lines.append(f"{f},Ana,{flank}")
    (gallery / "manifest.csv").write_text("\n".join(lines) + "\n")
    size = (1200, 600)
    frame = PILImage.new("RGB", size, (90, 110, 70))
    for (src, _), box in ((ana[2], BOX_A), (bia[2], BOX_B)):
        x0, y0, x1, y1 = crop_rect(Box(*box), *size, margin=0.0)
        frame.paste(PILImage.open(DEMO_DIR / "images" / src).convert("RGB").resize((x1 - x0, y1 - y0)), (x0, y0))
    frame.save(frames / "pair.jpg", quality=95)
    md = {"info": {"format_version": "1.3", "detector": "md_v5a.0.0.pt"},
          "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
          "images": [{"file": "pair.jpg", "detections": [{"category": "1", "conf": 0.93, "bbox": BOX_A},
                                                         {"category": "1", "conf": 0.81, "bbox": BOX_B}]}]}
    (work / "md.json").write_text(json.dumps(md))
    cat = open_catalogue(data_dir)
    try:
        assert ingest_path(cat, gallery / "manifest.csv", format="manifest", user="seed").counts["imported"] == 2
        report = ingest_path(cat, frames, user="seed", detections=work / "md.json")
        pair = next(it for it in report.items if it.name == "pair.jpg")
        assert pair.status == "imported" and len(pair.annotation_ids) == 2, report.summary()
        store_deployments(cat, [deployment_spec({
            "deploymentID": "ST1-2024", "locationID": "ST1", "locationName": "Ridge station one",
            "latitude": "-17.36", "longitude": "-56.75", "deploymentStart": "2024-05-01T08:00:00-04:00",
            "deploymentEnd": "2024-05-20T17:00:00-04:00", "cameraID": "CAM-9", "cameraModel": CAMERA_MODEL})],
            user="seed")
        return tuple(pair.annotation_ids)
    finally:
        cat.close()


@pytest.fixture(scope="module")
def review_server(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("review-ui")
    ids = seed(root / "rosette-data", root / "seed")
    server = start_rosette(root / "rosette-data")
    server.annotations = ids
    try:
        yield server
    finally:
        server.stop()


def _shown(page) -> int | None:
    shown = shown_query_id(page)
    return int(shown) if shown is not None else None


def _lines(page, selector: str) -> dict[str, int]:
    """How many lines each element's text takes (a word broken over two lines counts two)."""
    return page.evaluate("""(sel) => Object.fromEntries([...document.querySelectorAll(sel)].map((el) => {
        const range = document.createRange(); range.selectNodeContents(el);
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        return [el.textContent.trim(), tops.size]; }))""", selector)


def test_review_says_which_animal_and_ends_the_queue_cleanly(review_server, page, shot):
    from playwright.sync_api import expect

    a, b = review_server.annotations
    page.goto(review_server.url)
    page.get_by_role("tab", name="Match review").click()
    expect(page.locator("#match-candidates .rz-card").first).to_be_visible(timeout=TIMEOUT_MS)

    # --- the left animal of the frame: titled with its photo, how many animals it holds and which one
    choose(page, "match-open", f"#{a} · pair.jpg · the left one of 2 animals")
    expect(page.locator("#match-facts .rz-facts")).to_have_attribute("data-image-id", str(a), timeout=TIMEOUT_MS)
    title = f"animal #{a}, one of 2 in photo pair.jpg (the left one)"
    expect(page.locator("#match-query-title")).to_have_text(title, timeout=TIMEOUT_MS)
    expect(page.locator("#match-facts")).to_contain_text(title)
    expect(page.locator("#match-candidates .rz-card")).to_have_count(1)  # Ana, the only candidate

    # --- Whole frame: the label is whole, the query drawn whole with its legend under it
    crop_src = page.locator("#match-query img").get_attribute("src")
    label = page.locator("#whole-frame .label-text")
    assert label.evaluate("el => el.scrollWidth <= el.clientWidth + 1"), "the Whole frame label is cut"
    box, block = label.bounding_box(), page.locator("#whole-frame").bounding_box()
    assert box["x"] + box["width"] <= block["x"] + block["width"] + 1
    assert _lines(page, "#whole-frame .label-text") == {"Whole frame": 1}  # squeezed, it read "Whol / fram"
    column = page.locator("#match-same-sighting").bounding_box()  # the right edge of the decisions' column
    assert block["x"] + block["width"] <= column["x"] + column["width"] + 1
    page.locator("#whole-frame input").check()
    wait_for(lambda: page.locator("#match-query img").get_attribute("src") != crop_src,
             what="the query to show its whole frame")
    dims = wait_for(lambda: (d := page.locator("#match-query img").evaluate(
        "img => img.complete && img.naturalWidth ? [img.naturalWidth, img.naturalHeight] : null")) and d,
        what="the whole frame to load")
    assert dims[0] == 1200 and dims[1] > 600, dims  # the 1200 x 600 frame with the legend strip under it
    shot("whole-frame-legend")
    page.locator("#whole-frame input").uncheck()

    # --- "not the same" on the only candidate: the photo stays, a new individual is offered
    # no waiting for navigations after a click: under a loaded machine that wait, not the app, ran out of time
    page.locator("#match-not").click(no_wait_after=True)
    status = page.locator("#match-status")
    expect(status).to_contain_text("the only candidate, is not this animal", timeout=TIMEOUT_MS)
    expect(status).to_contain_text("New individual (I)")
    assert _shown(page) == a
    shot("not-the-only-candidate")
    page.locator("#match-new").click(no_wait_after=True)
    expect(status).to_contain_text("new individual", timeout=TIMEOUT_MS)
    wait_for(lambda: _shown(page) != a, what="the queue to move on after the new individual")

    # --- decide the rest of the queue: at its end one consistent state, nothing left of the last photo
    end = page.locator("#match-queue-end")
    for _ in range(6):
        if end.count():
            break
        shown = _shown(page)
        has_candidate = page.locator("#match-candidates .rz-card").count() > 0
        page.locator("#match-unsure" if has_candidate else "#match-new").click(no_wait_after=True)
        wait_for(lambda: end.count() > 0 or _shown(page) != shown, what="the next photo or the queue's end")
        time.sleep(0.3)
    expect(end).to_contain_text("The review queue is done: all 4 animals have a decision.", timeout=TIMEOUT_MS)
    expect(page.locator("#match-candidates")).to_contain_text("Nothing is waiting for review")
    expect(page.locator("#match-facts .rz-facts")).to_have_count(0)
    expect(page.locator("#match-compare")).not_to_contain_text("Candidate 1")
    expect(page.locator("#match-compare")).to_contain_text("Chosen candidate")
    for button in ("match-same", "match-not", "match-unsure", "match-new", "match-same-sighting"):
        expect(page.locator(f"#{button}")).to_be_disabled()
    expect(page.locator("#match-undo")).to_be_enabled()
    shot("queue-end")

    # --- the Mask tab's picker tells the two animals of the frame apart
    page.get_by_role("tab", name="Mask", exact=True).click()
    box = page.locator("#mask-pick input").first
    box.click()
    box.fill("pair.jpg")
    expect(page.get_by_role("option", name=f"#{a} · pair.jpg · the left one of 2 animals")).to_be_visible(
        timeout=TIMEOUT_MS)
    expect(page.get_by_role("option", name=f"#{b} · pair.jpg · the right one of 2 animals")).to_be_visible()
    shot("mask-picker")


def test_captions_under_pictures_and_deployments_headers_whole(review_server, page, shot):
    from playwright.sync_api import expect

    page.goto(review_server.url)
    page.get_by_role("tab", name="Catalogue").click()
    choose(page, "catalogue-open", "Ana (")
    photos = page.locator("#catalogue-photos .thumbnail-item")
    expect(photos.first).to_be_visible(timeout=TIMEOUT_MS)
    for gallery in ("#catalogue-individuals", "#catalogue-photos", "#catalogue-best-photos"):
        items = page.locator(f"{gallery} .thumbnail-item")
        expect(items.first.locator(".caption-label")).to_be_visible(timeout=TIMEOUT_MS)
        shown = page.locator(f"{gallery} .grid-wrap").bounding_box()
        for k in range(items.count()):
            img = items.nth(k).locator("img").bounding_box()
            caption = items.nth(k).locator(".caption-label").bounding_box()
            assert caption["y"] >= img["y"] + img["height"] - 1, f"{gallery}: a caption covers its picture"
            assert caption["y"] + caption["height"] <= shown["y"] + shown["height"] + 1, f"{gallery}: a caption is cut"
    shot("captions")

    page.get_by_role("tab", name="Deployments").click()
    table = page.locator("#deployments-table")
    expect(table).to_contain_text(CAMERA_MODEL, timeout=TIMEOUT_MS)
    expect(table.locator("th").filter(has_text="Camera model")).to_be_visible()
    model_cell = table.get_by_text(CAMERA_MODEL).first
    cell, frame = model_cell.bounding_box(), table.bounding_box()
    assert cell["x"] + cell["width"] <= frame["x"] + frame["width"] + 1, "the camera model is off screen"
    lines = {k: n for k, n in _lines(page, "#deployments-table th .header-content span").items() if k}
    assert lines and all(n == 1 for n in lines.values()), lines
    # a start or end breaks between its date and its time of day, never inside either
    times = _lines(page, "#deployments-table td .dt")
    assert any(k.startswith("20") and len(k) == 10 for k in times), times
    assert times and all(n == 1 for n in times.values()), times
    shot("deployments")
