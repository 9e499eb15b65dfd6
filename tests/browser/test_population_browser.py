"""The Population tab in a real browser: choose the species and the occasion length, estimate, and see the
estimates table (Mh-Chao N = 7, worked by hand in tests/test_population_service.py), both plotly charts, the
capture histories, and the capture-history files offered for download."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import require_chromium, start_rosette
from tests.test_population_service import JAGUAR, build

TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def population_server(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("population-browser")
    build(root / "rosette-data")
    server = start_rosette(root / "rosette-data")
    try:
        yield server
    finally:
        server.stop()


def test_estimate_and_download(population_server, page, shot):
    page.goto(population_server.url)
    expect(page.get_by_role("tab", name="Ingest")).to_be_visible(timeout=TIMEOUT_MS)
    page.get_by_role("tab", name="Population").click()
    box = page.locator("#pop-species input").first
    box.click()
    box.fill(JAGUAR)
    page.locator("#pop-species [role='option']", has_text=JAGUAR).first.click()
    days = page.locator("#pop-days input")
    days.fill("2")
    page.locator("#pop-compute").click()
    table = page.locator("#pop-estimates")
    expect(table).to_contain_text("Mh-Chao", timeout=TIMEOUT_MS)
    # the table's text (Gradio also keeps a hidden sizing row of each column's longest value, without spaces)
    text = table.text_content()
    assert re.search(r"Mh-Chao\s+7\s+6\.1 – 16\.7\s+Animals may differ in how catchable they are", text), text
    assert re.search(r"M0\s+6\s+6 – 11\s+Every animal has the same capture probability", text), text
    expect(page.locator("#pop-basis")).to_contain_text("6 Panthera onca individual(s) detected on 3 occasion(s)")
    expect(page.locator("#pop-discovery .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#pop-frequencies .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#pop-histories")).to_contain_text("Ana")
    shot("estimates")
    page.locator("#pop-download").click()
    expect(page.locator("#pop-download-status")).to_contain_text("EPSG:32721", timeout=TIMEOUT_MS)
    expect(page.locator("#pop-files")).to_contain_text(".zip", timeout=TIMEOUT_MS)
    shot("download")
    assert not page.external_requests


def test_two_species_are_explained_in_the_tabs_words_and_a_changed_form_clears_the_results(population_server, page):
    page.goto(population_server.url)
    expect(page.get_by_role("tab", name="Ingest")).to_be_visible(timeout=TIMEOUT_MS)
    page.get_by_role("tab", name="Population").click()
    page.locator("#pop-compute").click()  # no species chosen; jaguars and an ocelot have individuals
    basis = page.locator("#pop-basis")
    expect(basis).to_contain_text("Individuals of 2 species are catalogued (Leopardus pardalis, Panthera onca): "
                                  "choose one in the Species list above", timeout=TIMEOUT_MS)
    assert "--species" not in basis.text_content()
    assert "Mh-Chao" not in page.locator("#pop-estimates").text_content()

    box = page.locator("#pop-species input").first
    box.click()
    box.fill(JAGUAR)
    page.locator("#pop-species [role='option']", has_text=JAGUAR).first.click()
    page.locator("#pop-days input").fill("2")
    page.locator("#pop-compute").click()
    expect(page.locator("#pop-estimates")).to_contain_text("Mh-Chao", timeout=TIMEOUT_MS)
    expect(basis).to_contain_text("6 Panthera onca individual(s)")
    # another occasion length: the estimates shown were for 2 days, so they go until Estimate is pressed again
    page.locator("#pop-days input").fill("3")
    expect(page.locator("#pop-estimates")).not_to_contain_text("Mh-Chao", timeout=TIMEOUT_MS)
    expect(basis).not_to_contain_text("individual(s) detected")
    expect(page.locator("#pop-histories")).not_to_contain_text("Ana")
    assert not page.external_requests
