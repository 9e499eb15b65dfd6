"""End to end in a real browser: a camera-trap frame holding two animals, imported with MegaDetector output,
is reviewed one animal (annotation) at a time; the Whole frame box shows the photos whole with their boxes.

The server gets its catalogue before it starts: a gallery of two named animals (two photos each) and one frame
made of one photo of each, side by side, with a MegaDetector batch JSON giving the two animal boxes.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.browser.conftest import choose, require_chromium, start_rosette
from tests.browser.test_match_review import wait_for
from tests.conftest import DEMO_DIR

TIMEOUT_MS = 60_000
BOX_A = [0.02, 0.05, 0.46, 0.9]
BOX_B = [0.52, 0.05, 0.46, 0.9]


def _two_animals() -> list[list[tuple[str, str]]]:
    """Three demo photos (file name, flank) of each of two animals."""
    with open(DEMO_DIR / "manifest.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    by_id: dict[str, list[tuple[str, str]]] = {}
    for r in rows:
        by_id.setdefault(r["identity"], []).append((r["filename"], r["flank"]))
    return [files[:3] for files in by_id.values() if len(files) >= 3][:2]


def seed(data_dir: Path, work: Path) -> tuple[int, int]:
    """The gallery (Ana, Bia: two photos each) and the two-animal frame with its MegaDetector JSON; returns the
    two annotation ids of the frame (left animal, right animal)."""
    from PIL import Image as PILImage

    from core.annotations import Box, crop_rect
    from db.io.ingest import ingest_path
    from db.session import open_catalogue

    (ana, bia) = _two_animals()
    gallery, frames = work / "gallery", work / "frames"
    gallery.mkdir(parents=True)
    frames.mkdir(parents=True)
    lines = ["filename,identity,flank"]
    for name, files in (("Ana", ana), ("Bia", bia)):
        for f, flank in files[:2]:
            (gallery / f).write_bytes((DEMO_DIR / "images" / f).read_bytes())
            lines.append(f"{f},{name},{flank}")
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
        report = ingest_path(cat, gallery / "manifest.csv", format="manifest", user="seed")
        assert report.counts.get("imported") == 4, report.summary()
        report = ingest_path(cat, frames, user="seed", detections=work / "md.json")
        pair = next(it for it in report.items if it.name == "pair.jpg")
        assert pair.status == "imported" and len(pair.annotation_ids) == 2, report.summary()
        return tuple(pair.annotation_ids)
    finally:
        cat.close()


@pytest.fixture(scope="module")
def trap_server(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("annotations")
    ids = seed(root / "rosette-data", root / "seed")
    server = start_rosette(root / "rosette-data")
    server.annotations = ids
    try:
        yield server
    finally:
        server.stop()


def _state(data_dir: Path, annotation_id: int) -> tuple[int | None, int]:
    """(individual id, standing decisions on it as the query) of an annotation, read from the server's database."""
    from db.models import Image, MatchDecision
    from db.session import open_catalogue

    cat = open_catalogue(data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            individual = s.scalar(select(Image.individual_id).where(Image.id == annotation_id))
            decisions = s.scalar(select(func.count(MatchDecision.id)).where(
                MatchDecision.query_image_id == annotation_id, MatchDecision.undone_at.is_(None)))
            return individual, int(decisions or 0)
    finally:
        cat.close()


#: mean brightness of the picture's last 0.7 % of columns (inside the neighbour's box) and of its middle third
_STRIP, _MIDDLE = (0.993, 1.0), (0.33, 0.66)
_COLUMN_MEANS = """img => img.decode().then(() => {
  const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width, c.height).data;
  const mean = (f0, f1) => { let s = 0, n = 0;
    for (let y = 0; y < c.height; y++) for (let x = Math.floor(f0 * c.width); x < Math.ceil(f1 * c.width); x++) {
      const i = (y * c.width + x) * 4; s += d[i] + d[i + 1] + d[i + 2]; n += 3; }
    return s / n; };
  return [mean(%s, %s), mean(%s, %s)]; })""" % (*_STRIP, *_MIDDLE)


def _column_means(data: Path, annotation_id: int) -> tuple[float, float]:
    """The same two means on the annotation's crop as matching reads it (nothing darkened)."""
    import math

    from db.embeddings import load_photo, sources_for
    from db.session import open_catalogue

    cat = open_catalogue(data, migrate=False)
    try:
        crop = load_photo(cat, sources_for(cat, [annotation_id])[0]).astype(float)
    finally:
        cat.close()
    w = crop.shape[1]
    return tuple(float(crop[:, math.floor(f0 * w):math.ceil(f1 * w)].mean()) for f0, f1 in (_STRIP, _MIDDLE))


def _open(page, annotation_id: int) -> None:
    from playwright.sync_api import expect

    choose(page, "match-open", f"#{annotation_id} ·")
    expect(page.locator("#match-facts .rz-facts")).to_have_attribute("data-image-id", str(annotation_id),
                                                                    timeout=TIMEOUT_MS)
    expect(page.locator("#match-candidates .rz-card").first).to_be_visible(timeout=TIMEOUT_MS)


def test_review_two_animals_of_one_frame_with_whole_frame(trap_server, page, shot):
    from playwright.sync_api import expect

    data = trap_server.data_dir
    a, b = trap_server.annotations
    page.goto(trap_server.url)
    page.get_by_role("tab", name="Match review").click()
    expect(page.locator("#match-candidates .rz-card").first).to_be_visible(timeout=TIMEOUT_MS)

    # --- annotation A: its crop is shown, with candidates from the gallery
    _open(page, a)
    query_img = page.locator("#match-query img")
    expect(query_img).to_be_visible()
    crop_src = query_img.get_attribute("src")
    # its margin reaches into B's box: the screen darkens that strip, and shows the rest as matching reads it
    shown = query_img.evaluate(_COLUMN_MEANS)
    read = _column_means(data, a)
    assert shown[0] < 0.6 * read[0], (shown, read)
    assert 0.85 * read[1] < shown[1] < 1.15 * read[1], (shown, read)
    cards = page.locator("#match-candidates .rz-card")
    assert cards.count() >= 2
    assert not (cards.first.locator("img").get_attribute("src") or "").startswith("data:")

    # --- Whole frame: the query, the chosen candidate and the cards become whole frames with their boxes
    page.locator("#whole-frame input").check()
    wait_for(lambda: query_img.get_attribute("src") != crop_src, what="the query to show its whole frame")
    wait_for(lambda: (page.locator("#match-candidates .rz-card img").first.get_attribute("src") or "")
             .startswith("data:image/jpeg"), what="the cards to show whole frames")
    shot("whole-frame")

    # --- decide A: the same as the top candidate
    name = page.locator("#match-candidates .rz-card[data-rank='1'] .rz-name").inner_text().strip()
    page.locator("#match-same").click()
    expect(page.locator("#match-status")).to_contain_text(f"animal #{a} is {name}", timeout=TIMEOUT_MS)

    # --- annotation B of the same photo: still whole frames while the box is ticked; a new individual
    _open(page, b)
    wait_for(lambda: (page.locator("#match-candidates .rz-card img").first.get_attribute("src") or "")
             .startswith("data:image/jpeg"), what="B's cards to show whole frames")
    frame_src = query_img.get_attribute("src")
    page.locator("#whole-frame input").uncheck()
    wait_for(lambda: query_img.get_attribute("src") != frame_src, what="the query to show its crop again")
    wait_for(lambda: not (page.locator("#match-candidates .rz-card img").first.get_attribute("src") or "")
             .startswith("data:"), what="the cards to show crops again")
    page.locator("#match-new").click()
    expect(page.locator("#match-status")).to_contain_text("new individual", timeout=TIMEOUT_MS)

    ind_a, dec_a = _state(data, a)
    ind_b, dec_b = wait_for(lambda: (s := _state(data, b))[0] is not None and s, what="B to be assigned")
    assert ind_a is not None and ind_b is not None and ind_a != ind_b
    assert (dec_a, dec_b) == (1, 1)

    # --- the Mask tab lists both animals of the photo in its Boxes panel
    page.get_by_role("tab", name="Mask", exact=True).click()
    choose(page, "mask-pick", f"#{b} ·")
    page.locator("#mask-boxes").get_by_text("Boxes").first.click()
    table = page.locator("#box-table")
    expect(table).to_contain_text(str(a), timeout=TIMEOUT_MS)
    expect(table).to_contain_text(name)
    expect(page.locator("#box-frame img")).to_be_visible()
    expect(page.locator("#box-x input")).to_have_value(re.compile(r"^0\.52"))
    shot("boxes")
    # move B's box a little, then undo the move
    page.locator("#box-x input").fill("0.5")
    page.locator("#box-move").click()
    expect(page.locator("#box-status")).to_contain_text(f"Moved box #{b}", timeout=TIMEOUT_MS)
    page.locator("#box-undo").click()
    expect(page.locator("#box-status")).to_contain_text(f"Undid the move of annotation {b}", timeout=TIMEOUT_MS)
    expect(page.locator("#box-x input")).to_have_value(re.compile(r"^0\.52"))

    # --- mask animal A on its own (prompted with its box, no click needed), accept it: B stays unmasked
    choose(page, "mask-pick", f"#{a} ·")
    # A is on screen once its box is (B's starts at x 0.52): "No mask proposed yet" reads the same for both
    expect(page.locator("#box-x input")).not_to_have_value(re.compile(r"^0\.52"), timeout=TIMEOUT_MS)
    report = page.locator("#mask-report")
    expect(report).to_contain_text("No mask proposed yet", timeout=TIMEOUT_MS)
    page.locator("#mask-run").click()
    expect(report).to_contain_text("Mask made by GrabCut", timeout=2 * TIMEOUT_MS)  # GrabCut on the crop
    page.locator("#mask-accept").click()
    expect(page.locator("#mask-status")).to_contain_text(f"Saved the mask of photo #{a}", timeout=TIMEOUT_MS)
    shot("masked-a")
    assert _mask_sources(data, a, b) == ("grabcut", None)


def test_the_catalogue_shows_a_photo_whole_with_every_animal_named(trap_server, page, shot):
    """Clicking an animal's picture on its individual's page shows the whole photo with both animals' boxes, and
    says in words which animals they are (issue 22: views of a photo draw all its boxes, named)."""
    from playwright.sync_api import expect

    from db.models import Image, Individual
    from db.session import open_catalogue

    a, b = trap_server.annotations
    cat = open_catalogue(trap_server.data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            names = {i: s.scalar(select(Individual.name).join(Image, Image.individual_id == Individual.id)
                                 .where(Image.id == i)) for i in (a, b)}
    finally:
        cat.close()
    assert all(names.values()), names  # the review test named both animals
    page.goto(trap_server.url)
    page.get_by_role("tab", name="Catalogue").click()
    choose(page, "catalogue-open", names[a])
    photos = page.locator("#catalogue-photos")
    expect(photos).to_contain_text(f"#{a} ·", timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-frame")).to_be_hidden()
    photos.get_by_text(f"#{a} ·").first.click()
    expect(page.locator("#catalogue-frame img")).to_be_visible(timeout=TIMEOUT_MS)
    caption = page.locator("#catalogue-frame-caption")
    expect(caption).to_contain_text("2 animals", timeout=TIMEOUT_MS)
    expect(caption).to_contain_text(f"#{a} {names[a]} (megadetector) ← this one")
    expect(caption).to_contain_text(f"#{b} {names[b]} (megadetector)")
    shot("catalogue-frame")


def _mask_sources(data, a: int, b: int) -> tuple:
    from db.models import Image
    from db.session import open_catalogue

    cat = open_catalogue(data, migrate=False)
    try:
        with cat.unit_of_work() as s:
            return s.get(Image, a).mask_source, s.get(Image, b).mask_source
    finally:
        cat.close()
