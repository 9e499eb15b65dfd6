"""Real browser: the review-screen mends, flank suggestion accepted with F, Models tab compare and promote, and
the embedding map's hover thumbnail and box selection -- on a catalogue the test makes."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.browser.conftest import RosetteServer, choose, require_chromium, settled_text, start_rosette
from tests.synthetic_reid import make_reid_set

FLANKLESS = 3  # photos whose flank label is removed (they get a suggestion)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RosetteServer]:
    require_chromium()
    from db.identify.benchmarks import create_benchmark
    from db.inspect.embedding_map import compute_map
    from db.models import Flank, Image
    from db.session import open_catalogue
    from jobs import queue

    root = tmp_path_factory.mktemp("models-map")
    manifest = make_reid_set(root / "photos", individuals=8, photos_each=6, seed=11)
    cat = open_catalogue(root / "rosette-data")
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.4, seed=0)
    job = queue.submit_and_run(cat, "train", {"benchmark": "syn", "head": "supcon", "epochs": 3, "views": 3,
                                             "diagnose": False, "name": "syn-trained"})
    assert job.status.value == "succeeded", job.message
    compute_map(cat, "efficientnet_lite0")
    with cat.unit_of_work() as s:
        for img in s.query(Image).order_by(Image.id.desc()).limit(FLANKLESS):
            img.flank, img.flank_source = Flank.unknown, None
        s.commit()
    cat.close()
    srv = start_rosette(root / "rosette-data", user="ana")
    try:
        yield srv
    finally:
        srv.stop()


def test_review_screen_layout_not_same_and_a_bad_date(server, page, shot):
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(server.url)
    page.get_by_role("tab", name="Match review").click()
    expect(page.locator("#match-grid .rz-card")).not_to_have_count(0, timeout=60_000)
    q, c = page.locator("#match-query").bounding_box(), page.locator("#match-compare").bounding_box()
    same = page.locator("#match-same").bounding_box()
    assert c["x"] >= q["x"] + 0.5 * q["width"] and abs(c["y"] - q["y"]) < 20  # side by side
    assert q["y"] + q["height"] <= 900 and same["y"] + same["height"] <= 900  # above the fold
    shot("layout")
    facts = settled_text(page.locator("#match-facts"))
    # "not the same" compares the next candidate at once (its card chosen, its caption shown), before the answer
    page.evaluate("""() => {
      window.rzEarly = false;
      const look = () => {
        const early = document.querySelector('.rz-pair[data-ahead]');
        const card = document.querySelector('#match-candidates .rz-card.rz-selected');
        const label = document.querySelector('#match-compare .rz-photo-label');
        if (early && card && card.dataset.rank === '2' && label && label.textContent.startsWith('Candidate 2:'))
          window.rzEarly = true;
      };
      new MutationObserver(look).observe(document.querySelector('#match-main'),
                                         {subtree: true, childList: true, attributes: true, characterData: true});
    }""")
    page.keyboard.press("n")
    expect(page.locator("#match-status")).to_contain_text("Now comparing candidate 2", timeout=30_000)
    assert page.evaluate("window.rzEarly")
    expect(page.locator(".rz-pair[data-ahead]")).to_have_count(0)
    expect(page.locator("#match-candidates .rz-card.rz-selected")).to_have_attribute("data-rank", "2")
    assert settled_text(page.locator("#match-facts")).split("Currently")[0] == facts.split("Currently")[0]
    expect(page.locator("#match-compare")).to_contain_text("Candidate 2")
    n_cards = page.locator("#match-grid .rz-card").count()
    page.locator("#match-more-filters").click()
    box = page.locator("#match-date-from input, #match-date-from textarea").first
    box.fill("2024-13-45")
    box.press("Enter")
    expect(page.get_by_text(re.compile("must be a date like"))).to_be_visible(timeout=20_000)
    assert page.locator("#match-grid .rz-card").count() == n_cards  # the screen is intact
    assert settled_text(page.locator("#match-facts")).split("Currently")[0] == facts.split("Currently")[0]


def test_flank_suggestion_accepted_with_f(server, page):
    from playwright.sync_api import expect

    page.goto(server.url)
    page.get_by_role("tab", name="Mask").click()
    choose(page, "mask-pick", "#48 ")
    expect(page.locator("#mask-flank-suggestion")).to_contain_text("Suggested flank", timeout=60_000)
    expect(page.locator("#mask-accept-flank")).to_be_visible()
    page.locator("body").click(position={"x": 5, "y": 5})
    page.keyboard.press("f")
    expect(page.locator("#mask-status")).to_contain_text("Flank set to", timeout=20_000)
    expect(page.locator("#mask-accept-flank")).to_be_hidden()


def test_models_tab_compare_and_promote(server, page, shot):
    from playwright.sync_api import expect

    page.goto(server.url)
    page.get_by_role("tab", name="Models").click()
    expect(page.locator("#models-table tr[data-model='syn-trained']")).to_have_count(1, timeout=30_000)
    prov = page.locator("#models-table tr[data-model='syn-trained'] td.prov").get_attribute("title")
    assert "sha256" in prov and "fingerprint" in prov
    choose(page, "models-a", "syn-trained")
    choose(page, "models-b", "efficientnet_lite0")
    page.locator("#models-compare").click()
    expect(page.locator("#models-verdict")).to_contain_text("CMC@1", timeout=90_000)
    expect(page.locator("#models-diff-plot .main-svg").first).to_be_visible(timeout=30_000)
    choose(page, "models-pick", "syn-trained")
    page.locator("#models-promote").click()
    expect(page.locator("#models-status")).to_contain_text("is now the active model", timeout=30_000)
    expect(page.locator("#models-table tr[data-model='syn-trained']")).to_have_attribute(
        "data-status", "active", timeout=30_000)
    shot("promoted")


def test_map_hover_shows_a_thumbnail_and_a_box_opens_the_photos(server, page, shot):
    from playwright.sync_api import expect

    page.goto(server.url)
    page.get_by_role("tab", name="Map").click()
    page.locator("#map-show").click()
    expect(page.locator("#map-plot[data-ready='1']")).to_have_count(1, timeout=60_000)
    x, y = page.evaluate("""() => {
        const gd = document.getElementById('map-plot');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        const bb = gd.querySelector('.nsewdrag').getBoundingClientRect();
        const t = gd.data[0];
        return [bb.left + xa.l2p(t.x[0]), bb.top + ya.l2p(t.y[0])];
    }""")
    # the colour legend: a swatch per individual, coloured as its points are (issue 14, item 4)
    legend = page.locator("#map-legend")
    expect(legend).to_contain_text("Colour: individual")
    first_key = legend.locator(".map-key").first
    swatch = first_key.locator(".map-swatch").evaluate("e => getComputedStyle(e).backgroundColor")
    point_colours = page.evaluate("() => [...new Set(document.getElementById('map-plot').data[0].marker.color)]")
    assert legend.locator(".map-key").count() == len(point_colours) >= 2
    hexes = {tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in point_colours}
    assert tuple(int(v) for v in re.findall(r"\d+", swatch)[:3]) in hexes
    page.mouse.move(x, y)
    tip = page.locator("#map-tip")
    expect(tip).to_be_visible(timeout=10_000)
    assert "thumbs" in tip.locator("img").get_attribute("src") and tip.get_attribute("data-image-id")
    bb = page.locator("#map-plot .nsewdrag").bounding_box()
    page.mouse.move(bb["x"] + 2, bb["y"] + 2)
    page.mouse.down()
    page.mouse.move(bb["x"] + bb["width"] / 2, bb["y"] + bb["height"] / 2, steps=5)
    page.mouse.move(bb["x"] + bb["width"] - 2, bb["y"] + bb["height"] - 2, steps=5)
    page.mouse.up()
    expect(page.locator("#map-selection")).to_contain_text("photos selected", timeout=20_000)
    n = int(re.search(r"(\d+) photos selected", page.locator("#map-selection").inner_text()).group(1))
    assert n >= 40
    expect(page.locator("#map-gallery img").first).to_be_visible(timeout=20_000)
    expect(page.locator("#map-selection")).to_contain_text("different individuals")  # the wide box swept several
    shot("map-selection")
    assert page.external_requests == []


def test_catalogue_tab_sets_an_individuals_species(server, page):
    from playwright.sync_api import expect

    page.goto(server.url)
    page.get_by_role("tab", name="Catalogue").click()
    choose(page, "catalogue-open", "ind07")
    expect(page.locator("#catalogue-species input")).to_have_value("default", timeout=20_000)
    box = page.locator("#catalogue-species input")
    box.fill("okapi")
    box.press("Enter")
    page.locator("#catalogue-set-species").click()
    expect(page.locator("#catalogue-species-status")).to_contain_text("now okapi", timeout=20_000)
    page.locator("#catalogue-undo").click()
    expect(page.locator("#catalogue-status")).to_contain_text("Undone", timeout=20_000)
    expect(page.locator("#catalogue-species input")).to_have_value("default", timeout=20_000)


def test_benchmarks_tab_queues_a_spot_evaluation_with_lnbnn_own_candidates(server, page):
    """The spot-evidence form: LNBNN's own top candidates joined to the shortlist is a field (10 by default); the
    queued job's request carries the number typed, and the status line says it. The job is cancelled at once: its
    figures are tested in tests/test_spots_pipeline.py."""
    import re

    from playwright.sync_api import expect

    from db.session import open_catalogue
    from jobs import queue

    page.goto(server.url)
    page.get_by_role("tab", name="Benchmarks").click()
    choose(page, "bench-pick", "syn")
    page.locator("#bench-spots-box").get_by_text("Re-rank with spot evidence").click()
    own = page.locator("#bench-spot-own input")
    expect(own).to_have_value("10", timeout=20_000)
    own.fill("5")
    own.press("Tab")
    expect(own).to_have_value("5")
    page.locator("#bench-spot-evaluate").click()
    status = page.locator("#bench-status")
    expect(status).to_contain_text("queued as job", timeout=30_000)
    expect(status).to_contain_text("top 50 joined by LNBNN's own top 5")
    job_id = int(re.search(r"queued as job #(\d+)", status.inner_text()).group(1))
    cat = open_catalogue(server.data_dir)
    try:
        job = queue.get_job(cat, job_id)
        assert job.params["lnbnn_shortlist"] == 5 and job.params["lnbnn"] is True
        queue.request_cancel(cat, job_id, by="test")
    finally:
        cat.close()
