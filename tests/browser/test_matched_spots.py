"""End to end in a real browser: match review with a fused pipeline as the active model -- the candidate cards
show their matched spots, and "Show matched spots" (button or key S) draws the pair with lines joining the
same coat spots.

The server gets a small catalogue of synthetic spotted animals before it starts (masked RGBA photos), a
pipeline written straight into the models table (calibrated on made-up outcomes) and promoted to active.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator

import pytest

from tests.browser.conftest import RosetteServer, require_chromium, settled_text, start_rosette

pytestmark = pytest.mark.browser

TIMEOUT_MS = 60_000
# a1 is a slightly turned copy of a0 and the only photo not assigned yet: it heads the review queue
PHOTOS = [("a0.png", "Amber", "left"), ("a1.png", "", "left"), ("b0.png", "Bruno", "left"),
          ("b1.png", "Bruno", "left"), ("c0.png", "Cleo", "left"), ("d0.png", "Dora", "left")]


@pytest.fixture(scope="module")
def spots_server(tmp_path_factory) -> Iterator[RosetteServer]:
    require_chromium()
    from db.io.ingest import ingest_path
    from db.session import open_catalogue
    from db.species import promote_model
    from tests.test_match_spots_services import PIPELINE, make_photos, register_pipeline

    root = tmp_path_factory.mktemp("spots-browser")
    photos = root / "photos"
    photos.mkdir()
    make_photos(photos)  # makes a few more photos than listed; only the listed ones are imported
    with open(photos / "manifest.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["filename", "identity", "flank", "sighting"])
        for n, (name, ident, flank) in enumerate(PHOTOS):
            w.writerow([name, ident, flank, f"s{n}"])
    cat = open_catalogue(root / "rosette-data")
    try:
        report = ingest_path(cat, photos / "manifest.csv", format="manifest", user="seed")
        assert report.counts.get("imported") == len(PHOTOS), report.summary()
        register_pipeline(cat)
        promote_model(cat, PIPELINE)  # the store only: nothing is queued
    finally:
        cat.close()
    server = start_rosette(root / "rosette-data")
    try:
        yield server
    finally:
        server.stop()


def spots_text(page) -> str:
    return settled_text(page.locator("#match-spots-text"))


def test_cards_show_matched_spots_and_the_pair_is_drawn(spots_server, page, shot, tmp_path):
    from playwright.sync_api import expect

    from tests.test_match_spots_services import PIPELINE

    page.goto(spots_server.url)
    page.get_by_role("tab", name="Match review").click()
    cards = page.locator("#match-candidates .rz-card")
    expect(cards.first).to_be_visible(timeout=TIMEOUT_MS)  # first visit embeds and extracts keypoints
    # the pipeline is the active model: it ranks, and its provenance says what it is
    expect(page.locator("#match-model input")).to_have_value(PIPELINE)
    assert "shortlist" in page.locator("#match-provenance").get_attribute("title")
    # every card carries its spot evidence; the top one (a turned copy of the query) many matched spots
    top = page.locator("#match-candidates .rz-card[data-rank='1']")
    badge = top.locator(".rz-spots")
    expect(badge).to_contain_text(re.compile(r"^\d+ matched spots?$"))
    inliers = int(badge.get_attribute("data-inliers"))
    assert inliers >= 15
    assert "spots verified" in badge.get_attribute("title")
    assert page.locator("#match-candidates .rz-spots").count() == cards.count()
    meta_tip = top.locator(".rz-meta").get_attribute("title")
    assert "fused probability" in meta_tip and "raw global score" in meta_tip
    expect(top.locator(".rz-meta")).to_contain_text(f"{inliers} spots")
    query = int(page.locator("#match-facts .rz-facts").get_attribute("data-image-id"))
    name = top.locator(".rz-name").inner_text().strip()

    # --- key S: the matched spots of the photo and the chosen (top) candidate
    expect(page.locator("#match-spots-image img")).to_have_count(0)
    page.locator("#match-facts").click()
    page.keyboard.press("s")
    image = page.locator("#match-spots-image img").first
    expect(image).to_be_visible(timeout=TIMEOUT_MS)
    page.wait_for_function("() => { const i = document.querySelector('#match-spots-image img');"
                           " return i && i.complete && i.naturalWidth > 0; }", timeout=TIMEOUT_MS)
    natural = image.evaluate("i => [i.naturalWidth, i.naturalHeight]")
    assert natural[0] > natural[1] > 0  # the two photos side by side
    expect(page.locator("#match-spots-text")).to_contain_text(
        f"{inliers} matched spots between photo #{query} and candidate 1 ({name}", timeout=TIMEOUT_MS)
    assert "spots verified (sift" in spots_text(page)
    page.locator("#match-spots-image").scroll_into_view_if_needed()
    path = tmp_path / "matched-spots.png"
    page.screenshot(path=str(path), full_page=True)
    shot("matched-spots")

    # --- another candidate: the old drawing goes; the button draws the new pair
    second = page.locator("#match-candidates .rz-card[data-rank='2']")
    second_name = second.locator(".rz-name").inner_text().strip()
    second.click()
    expect(page.locator("#match-candidates .rz-card.rz-selected")).to_have_attribute("data-rank", "2",
                                                                                   timeout=TIMEOUT_MS)
    expect(page.locator("#match-spots-image img")).to_have_count(0, timeout=TIMEOUT_MS)
    expect(page.locator("#match-spots-text")).to_contain_text("press Show matched spots")
    page.locator("#match-show-spots").click()
    expect(page.locator("#match-spots-text")).to_contain_text(
        re.compile(rf"\d+ matched spots? between photo #{query} and candidate 2 \({re.escape(second_name)}"),
        timeout=TIMEOUT_MS)
    expect(page.locator("#match-spots-image img").first).to_be_visible()
    assert not page.external_requests, page.external_requests
