"""The Population tab's density section and activity panel in a real browser, on the simulated jaguar study
(tests/sim_study.py, one catchability for every animal) with 15 ocelot photos added: fit the density in the
background and see its estimates, map, detection curve and report, then on the curators' identities beside the
estimates as decided; then the jaguars' activity against the
ocelots', with the overlap and its interval; a changed occasion length puts the density away."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from db.io.ingest import ingest_path
from db.models import Deployment, Species
from db.session import open_catalogue
from tests.browser.conftest import require_chromium, start_rosette
from tests.sim_study import SPECIES, simulate_study
from tests.test_population_service import _annotation, _photo

OCELOT = "Leopardus pardalis"
TIMEOUT_MS = 30_000
FIT_TIMEOUT_MS = 120_000  # the job's process starts, fits, and fits again with twice the buffer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("density-browser")
    study = simulate_study(root / "package", catchability=0.8 / 5.8)
    cat = open_catalogue(root / "rosette-data")
    try:
        ingest_path(cat, study.package, format="camtrap-dp", user="tester")
        with cat.unit_of_work() as s:
            ocelot = Species(name=OCELOT)
            s.add(ocelot)
            s.flush()
            dep = s.scalars(select(Deployment).order_by(Deployment.id)).first()
            for k in range(15):  # through the day, one photo per event
                when = datetime(2024, 5, 1 + k % 9, 6) + timedelta(hours=0.8 * k)
                photo = _photo(s, 900 + k, deployment=dep, taken_at=when.strftime("%Y-%m-%dT%H:%M:%S-04:00"))
                _annotation(s, photo, ocelot, None)
            s.commit()
    finally:
        cat.close()
    running = start_rosette(root / "rosette-data")
    try:
        yield running
    finally:
        running.stop()


def _choose(page, selector: str, name: str) -> None:
    box = page.locator(f"{selector} input").first
    box.click()
    box.fill(name)
    page.locator(f"{selector} [role='option']", has_text=name).first.click()


def test_density_and_activity_panels(server, page, shot):
    page.goto(server.url)
    expect(page.get_by_role("tab", name="Ingest")).to_be_visible(timeout=TIMEOUT_MS)
    page.get_by_role("tab", name="Population").click()
    _choose(page, "#pop-species", SPECIES)
    page.locator("#pop-days input").fill("1")

    page.locator("#dens-panel").get_by_text("Density (spatial capture-recapture)").first.click()
    buffer = page.locator("#dens-buffer").get_by_role("textbox")  # filled as the panel opens, then left (Tab)
    buffer.fill("6000")
    buffer.press("Tab")
    expect(buffer).to_have_value("6000")
    page.locator("#dens-fit").click()
    status = page.locator("#dens-status")
    # a job starts within a second of being queued (the pre-forked runner): the status may already say it runs
    expect(status).to_contain_text(re.compile(r"Density fit (queued as job #|job #\d+ (running|done))"),
                                   timeout=TIMEOUT_MS)
    expect(status).to_contain_text("done: D = ", timeout=FIT_TIMEOUT_MS)
    text = page.locator("#dens-estimates").text_content()
    assert re.search(r"D \(animals per 100 km²\)\s+\d+\.\d\s+\d+\.\d – \d+\.\d\s+Activity centres are spread evenly",
                     text), text
    assert "sigma (m, how far an animal ranges)" in text and "half-normal curve" in text
    expect(page.locator("#dens-basis")).to_contain_text("Panthera onca: ")
    expect(page.locator("#dens-basis")).to_contain_text("buffer 6,000 m")
    expect(page.locator("#dens-map .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#dens-curve .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    assert page.locator("#dens-map .js-plotly-plot .scatterlayer .trace").count() >= 2  # stations and animals
    shot("density")
    page.locator("#dens-report").click()
    expect(page.locator("#dens-report-file")).to_contain_text(".md", timeout=TIMEOUT_MS)
    expect(page.locator("#dens-identities")).to_be_hidden()  # as decided: no second column to show

    # the same study on the curators' identities only: each estimate as decided beside it, and their provenance
    page.locator("#pop-identities").get_by_text("confirmed only", exact=True).click()
    expect(status).not_to_contain_text("done: D = ", timeout=TIMEOUT_MS)  # the fit shown answered another basis
    # the form's answer put away has landed (its table emptied): a fit queued now is not put away by it after
    expect(page.locator("#dens-estimates")).not_to_contain_text("D (animals per 100 km²)", timeout=TIMEOUT_MS)
    page.locator("#dens-fit").click()
    expect(status).to_contain_text("on confirmed identities", timeout=TIMEOUT_MS)
    side = page.locator("#dens-identities")
    expect(side).to_contain_text("Confirmed only", timeout=FIT_TIMEOUT_MS)
    for words in ("As decided", "D (per 100 km²)", "sigma (m)"):
        expect(side).to_contain_text(words)
    expect(page.locator("#dens-provenance")).to_contain_text("annotation(s) identified by a curator")
    expect(status).to_contain_text("done: D = ")
    shot("density-confirmed")

    page.locator("#act-panel").get_by_text("Activity over the day").first.click()
    _choose(page, "#act-species-b", OCELOT)
    page.locator("#act-compute").click()
    overlaps = page.locator("#act-overlaps")
    expect(overlaps).to_contain_text(f"{SPECIES} / {OCELOT}", timeout=FIT_TIMEOUT_MS)
    row = overlaps.text_content()
    assert re.search(r"Dhat1 = 0\.\d{3}\s+0\.\d{3} – [01]\.\d{3}", row), row
    expect(page.locator("#act-basis")).to_contain_text("one detection per event")
    expect(page.locator("#act-plot .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    shot("activity")
    # another occasion length: the density shown was fitted for 1 day, so it goes until Fit density is pressed again
    page.locator("#pop-days input").fill("2")
    expect(page.locator("#dens-estimates")).not_to_contain_text("D (animals per 100 km²)", timeout=TIMEOUT_MS)
    expect(page.locator("#dens-status")).not_to_contain_text("done: D = ")
    expect(overlaps).to_contain_text(OCELOT)  # activity does not depend on the occasions: it stays
    assert not page.external_requests
