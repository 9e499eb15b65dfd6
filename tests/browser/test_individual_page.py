"""In a real browser: an individual's page in the Catalogue tab shows its facts (first and last seen with where
the time came from, sightings and stations), its best photo per flank, a timeline and a station map (plain
plotly scatter plots, no map tiles: nothing leaves the machine), its home range, and a curator sets its sex.

The server gets its catalogue before it starts: four demo photos of one animal, three of them taken at three
camera stations (deployments) that make a right triangle with 10 km legs at -16.5° (50 km², worked by hand in
tests/test_home_range.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.browser.conftest import choose, require_chromium, start_rosette
from tests.conftest import DEMO_DIR

TIMEOUT_MS = 60_000
NAME = "Zuri Page"
DLON, DLAT = 0.093665, 0.090364  # 10 km at -16.5°
STATIONS = [("dep-A", "A", "Waterhole A", -16.5, 35.5), ("dep-B", "B", "Ridge B", -16.5, 35.5 + DLON),
            ("dep-C", "C", "Spring C", -16.5 + DLAT, 35.5)]
TIMES = ["2024-05-01T06:12:00+02:00", "2024-05-20T21:30:00+02:00", "2024-06-03T05:00:00+02:00"]


def seed(data_dir: Path, work: Path) -> int:
    """Four photos of one demo animal imported under NAME, the first three placed at the three stations with a
    time each; returns the individual's id."""
    from db.io.ingest import ingest_path
    from db.models import Deployment, Individual, Photo
    from db.session import open_catalogue

    with open(DEMO_DIR / "manifest.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["identity"]]
    animal = next(r["identity"] for r in rows if sum(x["identity"] == r["identity"] for x in rows) >= 4)
    files = [(r["filename"], r["flank"], r["sighting"]) for r in rows if r["identity"] == animal][:4]
    work.mkdir(parents=True)
    lines = ["filename,identity,flank,sighting"]
    for f, flank, sighting in files:
        (work / f).write_bytes((DEMO_DIR / "images" / f).read_bytes())
        lines.append(f"{f},{NAME},{flank},{sighting}")
    (work / "manifest.csv").write_text("\n".join(lines) + "\n")
    cat = open_catalogue(data_dir)
    try:
        report = ingest_path(cat, work / "manifest.csv", format="manifest", user="seed")
        assert report.counts.get("imported") == 4, report.summary()
        with cat.unit_of_work() as s:
            deployments = [Deployment(key=k, location_id=loc, location_name=name, lat=lat, lon=lon,
                                      start="2024-04-01T00:00:00+02:00", end="2024-08-01T00:00:00+02:00")
                           for k, loc, name, lat, lon in STATIONS]
            s.add_all(deployments)
            photos = {p.original_name: p for p in s.query(Photo)}
            for (f, _, _), dep, when in zip(files, deployments, TIMES):
                photos[f].deployment, photos[f].taken_at = dep, when
            s.commit()
            return s.query(Individual).filter_by(name=NAME).one().id
    finally:
        cat.close()


@pytest.fixture(scope="module")
def page_server(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("individual-page")
    individual = seed(root / "rosette-data", root / "seed")
    server = start_rosette(root / "rosette-data")
    server.individual = individual
    try:
        yield server
    finally:
        server.stop()


def test_open_an_individual_see_its_page_and_set_its_sex(page_server, page, shot):
    from playwright.sync_api import expect

    from db.models import Individual
    from db.session import open_catalogue

    page.goto(page_server.url)
    page.get_by_role("tab", name="Catalogue").click()
    choose(page, "catalogue-open", NAME)
    facts = page.locator("#catalogue-facts")
    expect(facts).to_contain_text("First seen 2024-05-01 06:12 (photo time) at Waterhole A", timeout=TIMEOUT_MS)
    expect(facts).to_contain_text("last seen 2024-06-03 05:00 (photo time) at Spring C")
    expect(facts).to_contain_text("at 3 stations (4 photos, 4 annotations)")
    expect(facts).to_contain_text("Sex: not recorded")
    expect(page.locator("#catalogue-best-photos img").first).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-best-photos")).to_contain_text("left flank · #")
    expect(page.locator("#catalogue-best-why")).to_contain_text("(left flank; best of 2)")
    expect(page.locator("#catalogue-best-why")).to_contain_text("then the largest crop in pixels")
    expect(page.locator("#catalogue-timeline .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-station-map .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-station-map")).to_contain_text("Ridge B")
    expect(page.locator("#catalogue-home-range")).to_contain_text("minimum convex polygon of 3 stations): 50.")
    shot("page")

    # a new name half typed (Rename not pressed) survives the refresh that another change brings
    name_box = page.locator("#catalogue-new-name input")
    name_box.fill("Half-typed name")
    choose(page, "catalogue-sex", "female")
    page.locator("#catalogue-set-traits").click()
    expect(page.locator("#catalogue-traits-status")).to_contain_text("sex not recorded → female", timeout=TIMEOUT_MS)
    expect(facts).to_contain_text("Sex: female", timeout=TIMEOUT_MS)
    expect(name_box).to_have_value("Half-typed name")
    shot("sex-set")
    cat = open_catalogue(page_server.data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            assert s.get(Individual, page_server.individual).sex == "female"
    finally:
        cat.close()
    assert not page.external_requests, page.external_requests  # no map tiles, no CDN: it works offline
