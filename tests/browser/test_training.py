"""End to end in a real browser: launch a training run from the Jobs tab, watch its curve move, reload the
page (same state), cancel it."""

from __future__ import annotations

import re

from db.identify.benchmarks import create_benchmark
from db.session import open_catalogue
from tests.browser.conftest import choose, start_rosette
from tests.synthetic_reid import make_reid_set


def epochs_done(page) -> int:
    text = page.locator("#train-summary").inner_text()
    m = re.search(r"(\d+) of \d+ epochs", text)
    return int(m.group(1)) if m else -1


def test_train_from_the_jobs_tab_curve_moves_then_cancel(tmp_path, page, shot):
    from playwright.sync_api import expect

    data = tmp_path / "rosette-data"
    manifest = make_reid_set(tmp_path / "photos", individuals=8, photos_each=6, seed=5)
    cat = open_catalogue(data)
    create_benchmark(cat, "syn", manifest=manifest, split="identity", test_fraction=0.3, seed=0)
    cat.close()
    server = start_rosette(data)
    try:
        page.goto(server.url)
        page.get_by_role("tab", name="Jobs").click()
        expect(page.locator("#train-summary")).to_contain_text("No training run yet", timeout=30_000)
        choose(page, "train-blocks", "last 2 blocks")
        choose(page, "train-holdout", "none: train on every identity")
        epochs = page.locator("#train-epochs input")
        epochs.fill("1000")
        epochs.press("Tab")
        page.locator("#train-start").click()
        expect(page.locator("#train-status")).to_contain_text("queued", timeout=30_000)
        page.wait_for_function(
            "() => /\\b([2-9]|\\d\\d+) of 1000 epochs/.test(document.querySelector('#train-summary').innerText)",
            timeout=240_000)
        first = epochs_done(page)
        expect(page.locator("#train-plot .scatterlayer .trace").first).to_be_visible(timeout=30_000)
        assert page.locator("#train-plot .scatterlayer .trace").count() >= 2  # loss and validation mAP
        page.wait_for_function(
            f"() => {{ const m = /(\\d+) of 1000 epochs/.exec(document.querySelector('#train-summary').innerText);"
            f" return m && Number(m[1]) > {first}; }}", timeout=120_000)
        shot("training")
        assert "epoch" in page.locator("#train-log textarea").input_value()
        # the form's hold-out reached the run: none asked for, where "automatic" would log why it chose none
        assert "no hold-out for calibration (asked for)" in (data / "jobs" / "1" / "log.txt").read_text()
        # a reload shows the same run
        page.reload()
        page.get_by_role("tab", name="Jobs").click()
        expect(page.locator("#train-summary")).to_contain_text("Job #1", timeout=30_000)
        assert epochs_done(page) >= first
        page.locator("#train-cancel").click()
        expect(page.locator("#train-summary")).to_contain_text("cancelled", timeout=60_000)
        expect(page.locator("#train-retry")).to_be_enabled(timeout=10_000)
        # the job list says where the run ran: this server's own (local) worker, not a Ray cluster
        expect(page.locator("#jobs-table th").filter(has_text="Ran on")).to_have_count(1)
        expect(page.locator("#job-row-1 td.ran-on")).to_contain_text("local (", timeout=10_000)
        shot("cancelled")
        assert page.external_requests == []
    finally:
        server.stop()
