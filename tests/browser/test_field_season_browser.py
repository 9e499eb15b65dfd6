"""A camera-trap season replayed in a real browser, as a new field user would run it, on one server.

The season is built from the shipped demo nyala photos: three camera stations (ST1-ST3, ten camera-days each),
14 frames zipped in station folders as the cameras store them (``ST1/IMG_0001.JPG``), with MegaDetector output:
one frame holds two animals, one an animal and a person, one nothing at all. In the browser the curator

1. uploads the stations' deployments CSV in the Deployments tab;
2. uploads the zip and the JSON in the Ingest tab, sees the folders previewed as stations, names the species,
   imports and reads the report;
3. in Match review names three individuals and confirms matches so that animals are caught again on other days
   and at other stations, and says "not the same" to wrong candidates the model ranked high;
4. opens an individual's page in the Catalogue tab;
5. runs the Population tab's estimate, then the estimate with identification uncertainty (which those rejections
   must not block), and opens the review list's first animal in Match review: both screens give it one p(new);
   no hint calls an animal of a catalogued individual new;
6. asks for a density fit, which three stations 1-2 km apart cannot carry: it is refused in one sentence; the
   density from one-flank photos is not offered, since no photo's flank was set, and one sentence says so;
7. writes a Camtrap DP package in the Export tab with the people blurred: the person's pixels in the package
   differ from the photo's, the rest of the photo does not, and the species is the one named, never ``default``.

The tests run in order on the module's server: each step works on what the previous one left.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy import select

from tests.browser.conftest import (
    choose,
    fill_settled,
    require_chromium,
    settled_text,
    shown_query_id,
    start_rosette,
)
from tests.browser.test_ingest_catalogue import upload
from tests.browser.test_match_review import wait_for
from tests.browser.test_review_ui_browser import _lines
from tests.conftest import DEMO_DIR

TIMEOUT_MS = 60_000
JOB_TIMEOUT_MS = 180_000  # the export job's child process starts, then writes and validates the package
SPECIES = "Tragelaphus angasii"
SIZE = (800, 560)  # a frame's width and height in pixels
ONE = [0.05, 0.1, 0.55, 0.8]  # the box of a frame's only animal
LEFT, RIGHT = [0.02, 0.1, 0.46, 0.8], [0.52, 0.1, 0.46, 0.8]  # the two animals of the two-animal frame
PERSON = [0.68, 0.15, 0.2, 0.7]
STATIONS = (("ST1", "Fig tree pan", -27.10, 32.40), ("ST2", "Sand river crossing", -27.10, 32.42),
            ("ST3", "Ridge road", -27.08, 32.41))
# (station, frame, local time, what it holds): animal letters index the demo photos of four nyala A-D
FRAMES = (
    ("ST1", "IMG_0001.JPG", "2024-05-01 06:10:00", "A0"),
    ("ST1", "IMG_0002.JPG", "2024-05-02 07:20:00", "B0"),
    ("ST1", "IMG_0003.JPG", "2024-05-03 12:00:00", ""),  # the wind moved the grass: nothing in it
    ("ST1", "IMG_0004.JPG", "2024-05-05 18:30:00", "A1"),
    ("ST1", "IMG_0005.JPG", "2024-05-07 05:45:00", "D0"),
    ("ST2", "IMG_0001.JPG", "2024-05-01 20:00:00", "C0"),
    ("ST2", "IMG_0002.JPG", "2024-05-03 09:15:00", "A2+person"),
    ("ST2", "IMG_0003.JPG", "2024-05-04 16:40:00", "B1"),
    ("ST2", "IMG_0004.JPG", "2024-05-06 06:05:00", "D1"),
    ("ST2", "IMG_0005.JPG", "2024-05-08 21:10:00", "B2"),
    ("ST3", "IMG_0001.JPG", "2024-05-02 19:30:00", "C1+D2"),
    ("ST3", "IMG_0002.JPG", "2024-05-04 06:50:00", "A3"),
    ("ST3", "IMG_0003.JPG", "2024-05-06 22:00:00", "C2"),
    ("ST3", "IMG_0004.JPG", "2024-05-09 07:35:00", "B3"),
)
PERSON_FRAME = ("ST2", "IMG_0002.JPG")
# the review: (frame, which animal of it, decision); "new:NAME" names a new individual, "same:NAME" confirms it,
# "not:NAME" says NAME is not this animal (as curators do to a wrong candidate the model ranked high)
REVIEW = (
    (("ST1", "IMG_0001.JPG"), 0, "new:Nandi"),
    (("ST1", "IMG_0004.JPG"), 0, "same:Nandi"),
    (("ST2", "IMG_0002.JPG"), 0, "same:Nandi"),
    (("ST1", "IMG_0002.JPG"), 0, "new:Bongani"),
    (("ST2", "IMG_0003.JPG"), 0, "not:Nandi"),
    (("ST2", "IMG_0003.JPG"), 0, "same:Bongani"),
    (("ST3", "IMG_0002.JPG"), 0, "not:Bongani"),
    (("ST3", "IMG_0002.JPG"), 0, "same:Nandi"),
    (("ST3", "IMG_0001.JPG"), 0, "not:Nandi"),  # the left animal of the two-animal frame
    (("ST3", "IMG_0001.JPG"), 0, "not:Bongani"),
    (("ST3", "IMG_0001.JPG"), 0, "new:Chaka"),
)
# animals left unreviewed whose individual is in the catalogue by then: no hint may call them new
KNOWN_UNREVIEWED = ((("ST2", "IMG_0005.JPG"), 0), (("ST3", "IMG_0004.JPG"), 0), (("ST3", "IMG_0003.JPG"), 0))


@dataclass
class Season:
    """What the test built: the zip, the MegaDetector JSON, the deployments CSV and each frame's bytes."""

    zip_path: Path
    detections: Path
    deployments_csv: Path
    frames: dict[tuple[str, str], bytes] = field(default_factory=dict)
    annotations: dict[tuple[str, str], list[int]] = field(default_factory=dict)  # left to right, after import


def _demo_animals() -> dict[str, list[str]]:
    """Four demo nyala (A-D) with their labelled photos."""
    with open(DEMO_DIR / "manifest.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["identity"].strip()]
    by_id: dict[str, list[str]] = {}
    for r in rows:
        by_id.setdefault(r["identity"], []).append(r["filename"])
    chosen = [files for files in by_id.values() if len(files) >= 4][:4]
    return dict(zip("ABCD", chosen))


def _pixels(box: list[float]) -> tuple[int, int, int, int]:
    x, y, w, h = box
    return round(x * SIZE[0]), round(y * SIZE[1]), round((x + w) * SIZE[0]), round((y + h) * SIZE[1])


def _frame(contents: str, animals: dict[str, list[str]], seed: int, when: str) -> tuple[bytes, list[dict]]:
    """One frame (grass-coloured noise with the demo photos pasted in their boxes, a person drawn as a high-contrast
    checkerboard) as a JPEG with its EXIF time, and its MegaDetector detections."""
    rng = np.random.default_rng(seed)
    base = np.clip(rng.normal((96, 112, 70), 12, (SIZE[1], SIZE[0], 3)), 0, 255).astype(np.uint8)
    frame = PILImage.fromarray(base)
    parts = [p for p in contents.split("+") if p]
    animal_parts = [p for p in parts if p != "person"]
    boxes = [ONE] if len(animal_parts) == 1 else [LEFT, RIGHT][:len(animal_parts)]
    detections = []
    for part, box, conf in zip(animal_parts, boxes, (0.94, 0.87)):
        x0, y0, x1, y1 = _pixels(box)
        photo = PILImage.open(DEMO_DIR / "images" / animals[part[0]][int(part[1:])]).convert("RGB")
        frame.paste(photo.resize((x1 - x0, y1 - y0)), (x0, y0))
        detections.append({"category": "1", "conf": conf, "bbox": box})
    if "person" in parts:
        x0, y0, x1, y1 = _pixels(PERSON)
        yy, xx = np.mgrid[y0:y1, x0:x1]
        checker = ((yy // 6 + xx // 6) % 2).astype(bool)
        arr = np.asarray(frame).copy()
        arr[y0:y1, x0:x1] = np.where(checker[..., None], (235, 200, 170), (20, 25, 60))
        frame = PILImage.fromarray(arr)
        detections.append({"category": "2", "conf": 0.91, "bbox": PERSON})
    buf = io.BytesIO()
    exif = PILImage.Exif()
    exif[306] = when.replace("-", ":")
    frame.save(buf, format="JPEG", quality=92, exif=exif.tobytes())
    return buf.getvalue(), detections


def build_season(work: Path) -> Season:
    work.mkdir(parents=True, exist_ok=True)
    animals = _demo_animals()
    season = Season(zip_path=work / "season-2024.zip", detections=work / "megadetector.json",
                    deployments_csv=work / "deployments.csv")
    images = []
    with zipfile.ZipFile(season.zip_path, "w") as zf:
        for n, (station, name, when, contents) in enumerate(FRAMES):
            data, dets = _frame(contents, animals, 100 + n, when)
            season.frames[(station, name)] = data
            zf.writestr(f"{station}/{name}", data)
            images.append({"file": f"{station}/{name}", "detections": dets})
    season.detections.write_text(json.dumps({
        "info": {"format_version": "1.4", "detector": "md_v5a.0.0.pt"},
        "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"}, "images": images}))
    with open(season.deployments_csv, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["deploymentID", "locationID", "locationName", "latitude", "longitude", "deploymentStart",
                    "deploymentEnd", "cameraID", "cameraModel"])
        for k, (station, place, lat, lon) in enumerate(STATIONS, start=1):
            w.writerow([f"{station}-2024", station, place, lat, lon, "2024-04-30T12:00:00+02:00",
                        "2024-05-10T12:00:00+02:00", f"CAM-{k}", "Browning Dark Ops"])
    return season


@pytest.fixture(scope="module")
def season_server(tmp_path_factory):
    """An empty catalogue served, and the season's files to upload."""
    require_chromium()
    root = tmp_path_factory.mktemp("field-season")
    season = build_season(root / "season")
    server = start_rosette(root / "rosette-data")
    server.season = season
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def patient_page(page):
    """The season's screens are long (a full-page screenshot of the individual page is 3,600 px tall): on a loaded
    2-core machine an action or a screenshot gets more than the default 20 s."""
    page.set_default_timeout(45_000)
    return page


def _open_catalogue(server):
    from db.session import open_catalogue

    return open_catalogue(server.data_dir, migrate=False)


def _annotation_ids(server) -> dict[tuple[str, str], list[int]]:
    """Each imported frame's annotation ids, left to right, read from the server's database."""
    from db.models import Image, Photo

    cat = _open_catalogue(server)
    try:
        with cat.unit_of_work() as s:
            rows = s.execute(select(Photo.original_name, Image.id, Image.bbox_x)
                             .join(Image, Image.photo_id == Photo.id)).all()
    finally:
        cat.close()
    found: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for original, ident, x in rows:
        station, name = original.split("/")[-2:]
        found.setdefault((station, name), []).append((x, ident))
    return {k: [i for _, i in sorted(v)] for k, v in found.items()}


def _individual_of(server, annotation_id: int) -> str | None:
    from db.models import Image, Individual

    cat = _open_catalogue(server)
    try:
        with cat.unit_of_work() as s:
            return s.scalar(select(Individual.name).join(Image, Image.individual_id == Individual.id)
                            .where(Image.id == annotation_id))
    finally:
        cat.close()


def _columns_inside(page, elem_id: str) -> bool:
    """Every shown column header of the table ``elem_id`` ends inside the table's box (none off its right edge)."""
    return page.evaluate("""(id) => { const root = document.getElementById(id);
        const right = root.getBoundingClientRect().right;
        const heads = [...root.querySelectorAll('th')].map(th => th.getBoundingClientRect()).filter(r => r.width > 0);
        return heads.length > 0 && heads.every(r => r.right <= right + 1); }""", elem_id)


def test_1_deployments_then_the_station_folder_zip_with_megadetector(season_server, page, shot):
    from playwright.sync_api import expect

    season: Season = season_server.season
    page.goto(season_server.url)
    expect(page.get_by_role("tab", name="Ingest")).to_be_visible(timeout=TIMEOUT_MS)

    # --- the stations first: their deployments CSV in the Deployments tab
    page.get_by_role("tab", name="Deployments").click()
    upload(page, "deployments-csv", [str(season.deployments_csv)])
    page.locator("#deployments-import").click()
    expect(page.locator("#deployments-status")).to_contain_text("added 3 deployment(s)", timeout=TIMEOUT_MS)
    table = page.locator("#deployments-table")
    expect(table).to_contain_text("Sand river crossing", timeout=TIMEOUT_MS)
    expect(page.locator("#deployments-overview")).to_contain_text(
        "3 deployment(s) at 3 station(s), 0 linked photo(s), 30 camera-days in all")
    shot("1-deployments")

    # --- the season's zip and its MegaDetector JSON: the folders are previewed as the three stations
    page.get_by_role("tab", name="Ingest").click()
    upload(page, "ingest-files", [str(season.zip_path)])
    expect(page.locator("#ingest-files-count")).to_contain_text("1 file in the upload box: 1 zip",
                                                                timeout=TIMEOUT_MS)
    preview = page.locator("#ingest-folders-preview")
    expect(preview).to_contain_text("3 station folders: ST1 (5 photos), ST2 (5 photos), ST3 (4 photos)",
                                    timeout=TIMEOUT_MS)
    expect(preview).to_contain_text("Matching deployments: ST1 → ST1-2024; ST2 → ST2-2024; ST3 → ST3-2024")
    folders = page.locator("#ingest-folders")
    folders.get_by_label("camera stations", exact=False).check()
    expect(folders.get_by_label("camera stations", exact=False)).to_be_checked()
    page.locator("#ingest-species input, #ingest-species textarea").first.fill(SPECIES)
    page.get_by_text("MegaDetector boxes (optional)").click()
    upload(page, "ingest-detections", [str(season.detections)])
    shot("2-ingest-preview")

    # --- import: the report counts the season in the tab's own words
    page.locator("#ingest-import").click()
    summary = page.locator("#ingest-summary")
    expect(summary).to_contain_text("13 imported", timeout=120_000)
    expect(summary).to_contain_text("13 photos, 14 animals, 1 person blurred, 0 boxes below 0.2")
    expect(summary).to_contain_text("1 empty frame left out (tick \"keep empty frames\" to keep them)")
    report = page.locator("#ingest-report")
    expect(report).to_contain_text("IMG_0003.JPG")
    assert _columns_inside(page, "ingest-report"), "the report's Details run past the table's right edge"
    shot("3-ingest-report")

    season.annotations = _annotation_ids(season_server)
    assert len(season.annotations) == 13 and ("ST1", "IMG_0003.JPG") not in season.annotations
    assert len(season.annotations[("ST3", "IMG_0001.JPG")]) == 2
    from db.models import Deployment, Individual, Photo, Species

    cat = _open_catalogue(season_server)
    try:
        with cat.unit_of_work() as s:
            assert s.scalar(select(Individual.id)) is None  # the station folders named no individual
            linked = dict(s.execute(select(Photo.original_name, Deployment.key)
                                    .join(Deployment, Photo.deployment_id == Deployment.id)).all())
            assert s.scalar(select(Species.id).where(Species.name == SPECIES)) is not None
    finally:
        cat.close()
    assert len(linked) == 13 and all(dep == f"{name.split('/')[-2]}-2024" for name, dep in linked.items()), linked


def _open_in_review(page, annotation_id: int) -> None:
    """Pick the animal in "Open a photo". The picker's options are rebuilt while the queue moves on after a
    decision, so a pick that lands on a list being replaced is made again (at most three tries)."""
    from playwright.sync_api import Error as PlaywrightError

    for attempt in range(3):
        try:
            choose(page, "match-open", f"#{annotation_id} ·")
            wait_for(lambda: shown_query_id(page) == str(annotation_id), timeout_s=TIMEOUT_MS / 1000,
                     what=f"animal #{annotation_id} to be shown")
            return
        except (AssertionError, PlaywrightError):
            if attempt == 2:
                raise
            page.keyboard.press("Escape")


def test_2_match_review_names_individuals_and_recaptures_them(season_server, page, shot):
    from playwright.sync_api import expect

    season: Season = season_server.season
    assert season.annotations, "the import step did not run"
    page.goto(season_server.url)
    page.get_by_role("tab", name="Match review").click()
    # the first visit computes the features of the season's 14 animals
    expect(page.locator("#match-facts .rz-facts")).to_be_visible(timeout=3 * TIMEOUT_MS)
    status = page.locator("#match-status")
    for n, (frame, which, decision) in enumerate(REVIEW):
        annotation = season.annotations[frame][which]
        _open_in_review(page, annotation)
        kind, name = decision.split(":")
        if frame == ("ST3", "IMG_0001.JPG") and decision == "not:Nandi":
            expect(page.locator("#match-query-title")).to_have_text(
                f"animal #{annotation}, one of 2 in photo season-2024.zip/ST3/IMG_0001.JPG (the left one)",
                timeout=TIMEOUT_MS)
            expect(page.locator("#match-candidates .rz-card")).to_have_count(2, timeout=TIMEOUT_MS)  # Nandi, Bongani
            settled_text(page.locator("#match-candidates"))
            shot("4-review-two-animal-frame")
        if kind == "new":
            page.locator("#match-new-name input, #match-new-name textarea").first.fill(name)
            page.locator("#match-new").click()
            expect(status).to_contain_text("new individual", timeout=TIMEOUT_MS)
        else:
            card = page.locator("#match-candidates .rz-card").filter(
                has=page.locator(".rz-name", has_text=re.compile(f"^{name}$")))
            expect(card).to_have_count(1, timeout=TIMEOUT_MS)
            card.click()
            expect(card).to_have_class(re.compile(r"\brz-selected\b"), timeout=TIMEOUT_MS)
            if frame == PERSON_FRAME:
                shot("5-review-person-frame")
            if kind == "not":
                page.locator("#match-not").click()
                expect(status).to_contain_text(re.compile(rf"{name}\b.*(not the same|is not this animal)"),
                                               timeout=TIMEOUT_MS)
                assert shown_query_id(page) == str(annotation)  # the animal stays for its next candidate
                continue
            page.locator("#match-same").click()
            expect(status).to_contain_text(f"animal #{annotation} is {name}", timeout=TIMEOUT_MS)
        wait_for(lambda: _individual_of(season_server, annotation) == name, timeout_s=30,
                 what=f"decision {n + 1} ({decision}) to be stored")
        wait_for(lambda: shown_query_id(page) != str(annotation), timeout_s=30, what="the queue to move on")
    shot("6-review-done")


def test_3_an_individuals_page(season_server, page, shot):
    from playwright.sync_api import expect

    page.goto(season_server.url)
    page.get_by_role("tab", name="Catalogue").click()
    choose(page, "catalogue-open", "Nandi")
    facts = page.locator("#catalogue-facts")
    expect(facts).to_contain_text("First seen 2024-05-01 06:10 (photo time) at Fig tree pan", timeout=TIMEOUT_MS)
    expect(facts).to_contain_text("last seen 2024-05-05 18:30 (photo time) at Fig tree pan")
    expect(facts).to_contain_text("at 3 stations (4 photos, 4 annotations)")
    expect(page.locator("#catalogue-best-photos img").first).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-sightings")).to_contain_text("Sand river crossing", timeout=TIMEOUT_MS)
    assert _columns_inside(page, "catalogue-sightings"), "a sightings column runs past the table's right edge"
    heads = {k: n for k, n in _lines(page, "#catalogue-sightings th .header-content span").items() if k}
    assert heads and all(n == 1 for n in heads.values()), heads  # no header broken inside a word ("Phot os")
    expect(page.locator("#catalogue-timeline .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-station-map")).to_contain_text("Ridge road", timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-home-range")).to_contain_text("minimum convex polygon of 3 stations")
    shot("7-individual-page")


def test_4_population_estimate(season_server, page, shot):
    from playwright.sync_api import expect

    page.goto(season_server.url)
    page.get_by_role("tab", name="Population").click()
    choose(page, "pop-species", SPECIES)
    page.locator("#pop-days input").fill("1")
    page.locator("#pop-compute").click()
    table = page.locator("#pop-estimates")
    expect(table).to_contain_text("Mh-Chao", timeout=TIMEOUT_MS)
    basis = page.locator("#pop-basis")
    expect(basis).to_contain_text(f"3 {SPECIES} individual(s) detected on", timeout=TIMEOUT_MS)
    # Nandi caught on 4 days, Bongani on 2, Chaka on 1: f1 = f2 = 1, so Mh-Chao's N = 3 + 1*0/(2*2) = 3
    text = table.text_content()
    assert re.search(r"Mh-Chao\s+3\s", text), text
    expect(page.locator("#pop-histories")).to_contain_text("Nandi")
    for plot in ("#pop-discovery", "#pop-frequencies"):  # plotly draws after the tables: a curator sees both
        expect(page.locator(f"{plot} .main-svg").first).to_be_visible(timeout=TIMEOUT_MS)
    shot("8-population")


def _percent_or_dash(text: str) -> str:
    """A probability as both screens print it ("12%"), or "—" where it is withheld."""
    m = re.search(r"(\d+)%", text)
    return f"{m.group(1)}%" if m else "—"


def test_5_identification_uncertainty_after_rejections_and_one_probability(season_server, page, shot):
    """After decisions that rejected high-ranked candidates the uncertain basis runs; the review list's p(new) for
    an animal is the one Match review shows for it (or both withhold it); no hint calls a known animal new."""
    from playwright.sync_api import expect

    season: Season = season_server.season
    page.goto(season_server.url)
    page.get_by_role("tab", name="Population").click()
    choose(page, "pop-species", SPECIES)
    page.locator("#pop-days input").fill("1")
    page.locator("#pop-identities").get_by_text("with identification uncertainty", exact=True).click()
    page.locator("#pop-identities-panel").get_by_text("Whose identities").first.click()
    draws = page.locator("#pop-draws input")
    expect(draws).to_have_value("200", timeout=TIMEOUT_MS)
    fill_settled(draws, "20")
    page.locator("#pop-identities-compute").click()
    status = page.locator("#pop-identities-status")
    expect(status).to_contain_text("done: 20 draws", timeout=JOB_TIMEOUT_MS)
    review = page.locator("#pop-review-first")
    expect(review).to_contain_text("#", timeout=TIMEOUT_MS)
    shot("8b-identities")
    rows = review.get_by_role("row").filter(has=page.get_by_role("gridcell", name="unreviewed", exact=True))
    for k in range(rows.count()):  # an animal alone in its event: the list's row is its own posterior
        cells = [c.strip() for c in rows.nth(k).get_by_role("gridcell").all_inner_texts()]
        if re.fullmatch(r"#\d+", cells[0]):
            break
    else:
        raise AssertionError(f"no unreviewed animal alone in its event in the review list: {review.text_content()}")
    annotation = int(cells[0][1:])
    listed_new = _percent_or_dash(cells[-1])
    rows.nth(k).get_by_role("gridcell").first.click()
    expect(page.get_by_role("tab", name="Match review")).to_have_attribute("aria-selected", "true",
                                                                           timeout=TIMEOUT_MS)
    facts = page.locator("#match-facts .rz-facts")
    expect(facts).to_have_attribute("data-image-id", str(annotation), timeout=JOB_TIMEOUT_MS)
    header = page.locator("#match-header")
    if listed_new == "—":  # withheld on the list: Match review withholds too, and says why in one line
        expect(page.locator("#match-probability-withheld")).to_contain_text("No match probabilities",
                                                                           timeout=TIMEOUT_MS)
        assert page.locator("#match-p-new").count() == 0
    else:
        expect(page.locator("#match-p-new")).to_have_text(f"New animal: {listed_new}", timeout=TIMEOUT_MS)
    shot("8c-review-from-the-list")
    # following the hints creates no duplicate: no animal whose individual is catalogued is called new
    for frame, which in KNOWN_UNREVIEWED:
        known = season.annotations[frame][which]
        _open_in_review(page, known)
        settled_text(header)
        assert page.locator("#match-suggest-new").count() == 0, (known, header.text_content())


def test_6_density_is_refused_where_three_stations_cannot_measure_movement(season_server, page, shot):
    """Three stations 1-2 km apart, a handful of animals: sigma cannot be measured, so no density is shown; the
    refusal is one sentence that says what the array lacks."""
    from playwright.sync_api import expect

    page.goto(season_server.url)
    page.get_by_role("tab", name="Population").click()
    choose(page, "pop-species", SPECIES)
    page.locator("#pop-days input").fill("1")
    page.locator("#dens-panel").get_by_text("Density (spatial capture-recapture)").first.click()
    status = page.locator("#dens-status")
    # the default buffer (widened by itself); a buffer the curator gives is refused alike (tests/test_density_refusals)
    page.locator("#dens-fit").click()
    expect(status).to_contain_text(re.compile(r"Density fit job #\d+ refused: "), timeout=JOB_TIMEOUT_MS)
    expect(status).to_contain_text("cannot measure how far these animals move")
    assert "D = " not in status.text_content()
    assert not re.search(r"D \(animals per 100 km²\)\s+\d", page.locator("#dens-estimates").text_content())
    shot("8d-density-refused")

    # the models beyond the null: only what the season carries is offered (no sex, one session), and the
    # comparison is refused in one sentence with no table, as the null fit was
    expect(page.locator("#dens-models-offered")).to_contain_text("Models with sex need individuals with a sex",
                                                                 timeout=TIMEOUT_MS)
    offered = page.locator("#dens-models label")
    assert {offered.nth(i).inner_text().strip() for i in range(offered.count())} == {"g0~1", "g0~b"}
    for name in ("g0~1", "g0~b"):
        box = page.locator("#dens-models").get_by_label(name, exact=True)
        if not box.is_checked():
            box.check()
    page.locator("#dens-compare").click()
    models_status = page.locator("#dens-models-status")
    expect(models_status).to_contain_text(re.compile(r"Density models job #\d+ refused: "), timeout=JOB_TIMEOUT_MS)
    assert "AICc" not in models_status.text_content()
    assert not re.search(r"\d", page.locator("#dens-aic tbody").text_content())
    shot("8e-density-models-refused")

    # the two-flank model needs each detection's flank, which nobody set this season: not offered, in one
    # sentence that says how many lack one and where to set them, and the fit cannot be pressed
    page.locator("#dens-flanks-panel").get_by_text("Density from one-flank photos").first.click()
    offered = page.locator("#dens-flanks-offered")
    expect(offered).to_contain_text(re.compile(rf"Not offered: \d+ of the \d+ {SPECIES} detection\(s\) have no flank "
                                               r"set \(annotation\(s\) [\d, ]+\): set each one's flank in the Mask "
                                               r"or Match review tab, then fit again\.\s*$"), timeout=TIMEOUT_MS)
    expect(page.locator("#dens-flanks-fit")).to_be_disabled()
    assert not re.search(r"\d", page.locator("#dens-flanks-result tbody").text_content())
    shot("8f-flank-density-not-offered")


def test_7_camtrap_dp_export_blurs_the_person_and_names_the_species(season_server, page, shot):
    from playwright.sync_api import expect

    season: Season = season_server.season
    page.goto(season_server.url)
    page.get_by_role("tab", name="Export").click()
    expect(page.locator("#camtrap-people input[value='blur']")).to_be_checked(timeout=TIMEOUT_MS)
    page.locator("#camtrap-title input, #camtrap-title textarea").first.fill("Nyala season 2024")
    page.locator("#camtrap-run").click()
    status = page.locator("#camtrap-status")
    expect(status).to_contain_text("Valid Camtrap DP package: 3 deployment(s), 13 photo(s)", timeout=JOB_TIMEOUT_MS)
    expect(status).to_contain_text("1 photo(s) showing people copied with the people blurred")
    shot("9-export")
    link = page.locator('#camtrap-result a[href$=".zip"]')
    expect(link).to_have_count(1, timeout=TIMEOUT_MS)
    href = link.get_attribute("href")
    body = page.request.get(href if href.startswith("http") else season_server.url.rstrip("/") + href).body()
    with zipfile.ZipFile(io.BytesIO(body)) as zf:
        descriptor = json.loads(zf.read("datapackage.json"))
        observations = list(csv.DictReader(io.StringIO(zf.read("observations.csv").decode())))
        media = list(csv.DictReader(io.StringIO(zf.read("media.csv").decode())))
        station, name = PERSON_FRAME
        row = next(m for m in media if m["deploymentID"] == f"{station}-2024" and m["fileName"] == name)
        exported = np.asarray(PILImage.open(io.BytesIO(zf.read(row["filePath"]))).convert("RGB"), np.int16)
    assert descriptor["title"] == "Nyala season 2024"
    animals = [o for o in observations if o["observationType"] == "animal"]
    assert len(animals) == 14 and {o["scientificName"] for o in animals} == {SPECIES}
    assert "default" not in {o["scientificName"] for o in observations}
    assert [t["scientificName"] for t in descriptor["taxonomic"]] == [SPECIES]
    assert {o["individualID"] for o in animals} == {"Nandi", "Bongani", "Chaka", ""}
    original = np.asarray(PILImage.open(io.BytesIO(season.frames[PERSON_FRAME])).convert("RGB"), np.int16)
    assert exported.shape == original.shape
    x0, y0, x1, y1 = _pixels(PERSON)
    person = (slice(y0, y1), slice(x0, x1))
    assert np.abs(exported[person] - original[person]).mean() > 20  # the person is blurred away
    animal = _pixels(ONE)
    inner = (slice(animal[1] + 10, animal[3] - 10), slice(animal[0] + 10, animal[2] - 10))
    assert np.abs(exported[inner] - original[inner]).mean() < 6  # the animal beside them is not
    assert not page.external_requests
