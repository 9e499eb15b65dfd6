"""The Population tab's identities section in a real browser, on the simulated jaguar study with a third of its
identities removed and the model calibrated on decided pairs (tests/test_identities_study.py): the imputation runs
as a background job, then each estimate shows as decided beside "with identification uncertainty", with the
provenance counts and the annotations to review first; a click on one of those opens its photo in Match review."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import fill_settled, require_chromium, start_rosette
from tests.sim_study import SPECIES
from tests.test_identities_study import add_decisions, write_uncertain_study

TIMEOUT_MS = 30_000
JOB_TIMEOUT_MS = 240_000  # the job's process starts, embeds the study's photos, and draws


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_chromium()
    root = tmp_path_factory.mktemp("identities-browser")
    _, _, data_dir = write_uncertain_study(root)
    add_decisions(data_dir)
    running = start_rosette(data_dir)
    try:
        yield running
    finally:
        running.stop()


def test_both_columns_and_the_review_list_opening_match_review(server, page, shot):
    page.goto(server.url)
    expect(page.get_by_role("tab", name="Ingest")).to_be_visible(timeout=TIMEOUT_MS)
    page.get_by_role("tab", name="Population").click()
    box = page.locator("#pop-species input").first
    box.click()
    box.fill(SPECIES)
    page.locator("#pop-species [role='option']", has_text=SPECIES).first.click()
    page.locator("#pop-days input").fill("1")
    page.locator("#pop-identities").get_by_text("with identification uncertainty", exact=True).click()
    page.locator("#pop-identities-panel").get_by_text("Whose identities").first.click()
    # the panel's fields mount as it opens: fill once the field shows its default, and leave it (Tab) so that the
    # number is committed before the click reads it (a run once went off with the default 200 draws)
    draws = page.locator("#pop-draws input")
    expect(draws).to_have_value("200", timeout=TIMEOUT_MS)
    fill_settled(draws, "30")
    page.locator("#pop-identities-compute").click()
    status = page.locator("#pop-identities-status")
    # "queued" is soon replaced by the job's progress (polled every 2 s): either shows the job was queued
    expect(status).to_contain_text(re.compile(r"Imputation (queued as )?job #\d+"), timeout=TIMEOUT_MS)
    expect(page.locator("#pop-provenance")).to_contain_text("identified by a curator", timeout=TIMEOUT_MS)
    expect(status).to_contain_text("done: 30 draws", timeout=JOB_TIMEOUT_MS)
    side = page.locator("#pop-side-by-side")
    expect(side).to_contain_text("As decided: N")
    expect(side).to_contain_text("With identification uncertainty: N")
    expect(side).to_contain_text("Mh-Chao")
    review = page.locator("#pop-review-first")
    expect(review).to_contain_text("Expected narrowing")
    expect(review).to_contain_text("#")
    shot("identities")

    # an unreviewed annotation's row below the first opens its photo in Match review, at its place in the queue
    # (most informative first), not the photo the queue would show first anyway
    rows = review.get_by_role("row").filter(has=page.get_by_role("gridcell", name="unreviewed", exact=True))
    expect(rows.nth(1)).to_be_visible()
    cell = rows.nth(1).get_by_role("gridcell").first
    annotation = int(re.fullmatch(r"#(\d+)(, #\d+)*", cell.inner_text().strip()).group(1))
    cell.click()
    expect(page.get_by_role("tab", name="Match review")).to_have_attribute("aria-selected", "true",
                                                                           timeout=TIMEOUT_MS)
    facts = page.locator("#match-facts .rz-facts")
    expect(facts).to_have_attribute("data-image-id", str(annotation), timeout=JOB_TIMEOUT_MS)
    expect(facts).to_contain_text(f"#{annotation}")
    expect(page.locator("#match-status")).to_contain_text(f"Animal #{annotation}, opened from the Population tab")
    expect(page.locator("#match-status")).to_contain_text("Most informative for the")
    expect(page.locator("#match-header")).to_contain_text(re.compile(r"Animal ([2-9]|\d\d+) of \d+ in the review queue"))
    picker = page.locator("#match-open input")
    expect(picker).to_have_value(re.compile(rf"^#{annotation} "))
    expect(page.locator("#match-query img")).to_be_visible()
    expect(page.locator("#pop-review-first")).to_be_hidden()
    shot("identities-link-to-match-review")
    # decided, the next photo loads and "Open a photo" no longer names the one just decided
    page.locator("#match-unsure").click()
    expect(facts).not_to_have_attribute("data-image-id", str(annotation), timeout=TIMEOUT_MS)
    expect(picker).to_have_value("", timeout=TIMEOUT_MS)
