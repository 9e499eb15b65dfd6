"""End to end in a real browser: the Species tab lists the catalogue's species; an admin renames one and sees the
new name in the list, gives it a common name, merges it into the other (its individuals move, the species leaves the list) and undoes the
merge from the tab."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from tests.browser.conftest import choose, require_chromium, start_rosette

TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def species_server(tmp_path_factory):
    """A catalogue of two species: nyala (ny00, ny01) and lion (leo02, leo03), two photos each."""
    require_chromium()
    from db.io.ingest import ingest_path
    from db.session import open_catalogue
    from tests.synthetic_reid import make_two_species_manifest

    root = tmp_path_factory.mktemp("species-tab")
    manifest = make_two_species_manifest(root / "photos", seed=3)
    data = root / "rosette-data"
    cat = open_catalogue(data)
    try:
        assert ingest_path(cat, manifest, format="manifest", user="seed").counts["imported"] == 8
    finally:
        cat.close()
    server = start_rosette(data)
    try:
        yield server
    finally:
        server.stop()


def _species_of_individuals(data_dir: Path) -> dict[str, str]:
    from db.models import Individual, Species
    from db.session import open_catalogue

    cat = open_catalogue(data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            return dict(s.execute(select(Individual.name, Species.name)
                                  .join(Species, Species.id == Individual.species_id)).all())
    finally:
        cat.close()


def _open_species_tab(page) -> None:
    page.get_by_role("tab", name="Ingest").wait_for()
    # the tab bar wraps instead of folding tabs into a "More tabs" menu: every tab is in sight
    assert page.locator("#rosette-tabs button[aria-label='More tabs']").count() == 0
    page.get_by_role("tab", name="Species").click()


def test_rename_and_merge_a_species_in_the_species_tab(species_server, page, shot):
    from playwright.sync_api import expect

    page.goto(species_server.url)
    _open_species_tab(page)
    table = page.locator("#species-table")
    expect(table).to_contain_text("lion", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("nyala")
    expect(page.locator("#species-overview")).to_contain_text("3 species, 4 individuals, 8 photos and 8 animals in all")

    choose(page, "species-pick", "lion")
    page.locator("#species-new-name textarea, #species-new-name input").first.fill("Panthera leo")
    page.locator("#species-rename").click()
    status = page.locator("#species-status")
    expect(status).to_contain_text("Species lion is now Panthera leo", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("Panthera leo", timeout=TIMEOUT_MS)
    expect(page.locator("#species-history")).to_contain_text("renamed species lion to Panthera leo")
    assert _species_of_individuals(species_server.data_dir)["leo02"] == "Panthera leo"

    page.locator("#species-common-name textarea, #species-common-name input").first.fill("African lion")
    page.locator("#species-rename").click()
    expect(status).to_contain_text("The common name of Panthera leo is now African lion", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("African lion", timeout=TIMEOUT_MS)
    expect(page.locator("#species-history")).to_contain_text("set species Panthera leo's common name none → "
                                                              "African lion")

    common_name = page.locator("#species-common-name textarea, #species-common-name input").first
    choose(page, "species-pick", "nyala")  # the field shows the common name of the species picked
    expect(common_name).to_have_value("", timeout=TIMEOUT_MS)
    choose(page, "species-pick", "Panthera leo")
    expect(common_name).to_have_value("African lion", timeout=TIMEOUT_MS)
    choose(page, "species-merge-target", "nyala")
    page.locator("#species-merge").click()
    expect(status).to_contain_text("Merged species Panthera leo into nyala: 2 individuals, 4 photos",
                                   timeout=TIMEOUT_MS)
    expect(table).not_to_contain_text("Panthera leo", timeout=TIMEOUT_MS)
    expect(page.locator("#species-history")).to_contain_text("merged species Panthera leo into nyala")
    shot("merged")
    assert set(_species_of_individuals(species_server.data_dir).values()) == {"nyala"}

    page.locator("#species-undo").click()
    expect(status).to_contain_text("Undone: merged species Panthera leo into nyala", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("Panthera leo", timeout=TIMEOUT_MS)
    expect(page.locator("#species-history")).to_contain_text("(undone)", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("African lion")  # the merged species came back with its common name
    assert _species_of_individuals(species_server.data_dir) == {"ny00": "nyala", "ny01": "nyala",
                                                                "leo02": "Panthera leo", "leo03": "Panthera leo"}
    assert not page.external_requests
