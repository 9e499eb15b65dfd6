"""Real browser: the Diagnostics tab's "Selective sensitivity" panel measures a model on a small benchmark in the
background (the worker runs the job) and shows the four curves, the slopes table and the selectivity in words."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.browser.conftest import RosetteServer, choose, require_chromium, start_rosette
from tests.synthetic_reid import synthetic_catalogue

TIMEOUT_MS = 30_000
RUN_TIMEOUT_MS = 240_000  # the worker's child process loads torch and the backbone, then embeds 128 edited photos


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RosetteServer]:
    """A catalogue of 20 synthetic photos with alpha masks (5 animals x 4) and the benchmark ``syn`` (8 test
    photos of 2 animals)."""
    require_chromium()
    root = tmp_path_factory.mktemp("sensitivity-panel")
    cat, _ = synthetic_catalogue(root, individuals=5, photos_each=4, seed=3, masks=True)
    data = cat.data_dir
    cat.close()
    srv = start_rosette(data, user="ana")
    try:
        yield srv
    finally:
        srv.stop()


def test_measure_selective_sensitivity_and_read_the_curves(server, page, shot):
    from playwright.sync_api import expect

    page.goto(server.url)
    page.get_by_role("tab", name="Diagnostics", exact=True).click()
    page.get_by_role("tab", name="Selective sensitivity").click()
    expect(page.locator("#diag-sens-summary")).to_contain_text("No sensitivity run stored yet", timeout=TIMEOUT_MS)
    expect(page.locator("#diag-sens-benchmark input").first).to_have_value("syn", timeout=TIMEOUT_MS)
    choose(page, "diag-sens-backbone", "efficientnet_lite0")
    page.locator("#diag-sens-run").click()
    status = page.locator("#diag-sens-status")
    expect(status).to_contain_text(re.compile(r"Queued job #\d+: selective sensitivity of efficientnet_lite0 on syn"),
                                   timeout=TIMEOUT_MS)
    expect(status).to_contain_text("8 test photos")

    # the panel follows the job and shows the run when it has finished
    summary = page.locator("#diag-sens-summary")
    expect(summary).to_contain_text("efficientnet_lite0 on syn", timeout=RUN_TIMEOUT_MS)
    expect(status).to_contain_text("finished", timeout=TIMEOUT_MS)
    expect(summary).to_contain_text("Selectivity")
    expect(summary).to_contain_text(re.compile(r"(Selective|Not selective): "))
    selectivity = page.locator("#diag-sens-selectivity")
    expect(selectivity).to_have_text(re.compile(r"^\d+\.\d\d$|^unbounded"))
    assert "efficientnet_lite0" in selectivity.get_attribute("title")  # provenance one hover away
    assert "seed 0" in selectivity.get_attribute("title")

    plot = page.locator("#diag-sens-plot .js-plotly-plot")
    expect(plot).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#diag-sens-plot .scatterlayer .trace")).to_have_count(4, timeout=TIMEOUT_MS)
    for name in ("background: slope", "lighting: slope", "viewpoint: slope", "identity: slope"):
        expect(page.locator("#diag-sens-plot")).to_contain_text(name)
    expect(page.locator("#diag-sens-plot")).to_contain_text("Selectivity")

    table = page.locator("#diag-sens-table")
    for words in ("A new background (background)", "Lighting (lighting)", "A change of viewpoint (viewpoint)",
                  "A different animal's coat (identity)"):
        expect(table).to_contain_text(words, timeout=TIMEOUT_MS)
    expect(page.locator("#diag-sens-stored input").first).to_have_value(re.compile(r"efficientnet_lite0 on syn"))
    shot("curves")

    expect(page.get_by_text("Traceback")).to_have_count(0)
    assert page.external_requests == [], f"the page tried to reach the internet: {page.external_requests}"
