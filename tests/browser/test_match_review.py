"""End to end in a real browser: review matches, confirm the top candidate by button and by key, undo both.

The server gets a small catalogue before it starts: 12 nyala photos of three
animals, three of them not assigned yet (they head the review queue).
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from tests.browser.conftest import require_chromium, sign_in, start_rosette

TIMEOUT_MS = 45_000
PASSWORD = "review-password"
NAMES = ("Amber", "Bruno", "Cleo")
PREFERRED = ("nyala_149", "nyala_85", "nyala_144")  # in the shared set; the shipped demo set gives others


def seed(data_dir: Path, nyala_dir: Path, manifest: list[dict[str, str]], work: Path) -> None:
    """Per animal: three assigned photos (two sightings) and one unassigned photo (a third sighting)."""
    from db.io.ingest import ingest_path
    from db.session import open_catalogue
    from tests.nyala_subset import animals_with_sightings

    rows = []
    for ident, name in zip(animals_with_sightings(manifest, n=3, min_sightings=3, prefer=PREFERRED), NAMES):
        mine = [r for r in manifest if r["identity"] == ident]
        sightings = list(dict.fromkeys(r["sighting"] for r in mine))[:3]
        rows += [(r, name) for r in [r for r in mine if r["sighting"] == sightings[0]][:2]]
        rows += [(r, name) for r in [r for r in mine if r["sighting"] == sightings[1]][:1]]
        rows += [(r, "") for r in [r for r in mine if r["sighting"] == sightings[2]][:1]]
    work.mkdir(parents=True, exist_ok=True)
    for r, _ in rows:
        shutil.copy(nyala_dir / "images" / r["filename"], work / r["filename"])
    (work / "manifest.csv").write_text("filename,identity,flank,sighting,date\n" + "".join(
        f"{r['filename']},{name},{r['flank']},{r['sighting']},2024-05-0{i % 9 + 1}\n" for i, (r, name) in enumerate(rows)))
    cat = open_catalogue(data_dir)
    try:
        report = ingest_path(cat, work / "manifest.csv", format="manifest", user="seed")
        assert report.counts.get("imported") == len(rows), report.summary()
    finally:
        cat.close()


@pytest.fixture(scope="module")
def match_server(tmp_path_factory, nyala_dir, nyala_manifest):
    require_chromium()
    root = tmp_path_factory.mktemp("match")
    seed(root / "rosette-data", nyala_dir, nyala_manifest, root / "seed")
    from db.session import open_catalogue
    from db.users import add_user

    cat = open_catalogue(root / "rosette-data")
    for name in ("ana", "ben", "cid"):  # curators with their own accounts
        add_user(cat, name, PASSWORD, role="curator", by="setup")
    add_user(cat, "vic", PASSWORD, role="viewer", by="setup")
    add_user(cat, "ada", PASSWORD, role="admin", by="setup")
    cat.close()
    server = start_rosette(root / "rosette-data", sign_in=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture()
def page(page, match_server):
    """Every test here reviews as ana, signed in."""
    sign_in(page, match_server, "ana", PASSWORD)
    return page


def assignment(data_dir: Path, image_id: int) -> str | None:
    """The name of the individual a photo belongs to, read straight from the server's database."""
    from db.models import Image, Individual
    from db.session import open_catalogue

    cat = open_catalogue(data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            return s.scalar(select(Individual.name).join(Image, Image.individual_id == Individual.id)
                            .where(Image.id == image_id))
    finally:
        cat.close()


def wait_for(predicate, *, timeout_s: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def shown_query(page) -> int:
    return int(page.locator("#match-facts .rz-facts").get_attribute("data-image-id"))


def top_candidate(page) -> tuple[int, str]:
    card = page.locator("#match-candidates .rz-card[data-rank='1']")
    return int(card.get_attribute("data-image-id")), card.locator(".rz-name").inner_text().strip()


def test_confirm_top_candidate_by_button_and_key_then_undo(match_server, page, shot):
    from playwright.sync_api import expect

    data = match_server.data_dir
    page.goto(match_server.url)
    page.get_by_role("tab", name="Match review").click()
    cards = page.locator("#match-candidates .rz-card")
    expect(cards.first).to_be_visible(timeout=TIMEOUT_MS)  # first visit computes the features of 12 photos
    expect(page.locator("#match-query img")).to_be_visible()
    expect(page.locator("#match-header")).to_contain_text("Animal 1 of")
    # which index found the candidates: a small gallery is searched exactly
    expect(page.locator("#match-index")).to_contain_text("searched by exact (FAISS flat, ")
    assert "efficientnet_lite0" in page.locator("#match-provenance").get_attribute("title")
    # the top card is chosen by default, and its score bar has a width
    expect(page.locator("#match-candidates .rz-card.rz-selected")).to_have_attribute("data-rank", "1")
    shot("review")

    # --- 1. confirm the top candidate with the button
    first_query = shown_query(page)
    assert assignment(data, first_query) is None  # the queue starts with photos not yet assigned
    _, first_name = top_candidate(page)
    # every state the review area passes through, as (query, top candidate, counter): one decision's answer must
    # change the three together, never show the next animal beside the last one's candidates or counter
    # the next animal is drawn ahead while this one is looked at, and shown the moment the decision is sent
    expect(page.locator(f"#match-ahead .rz-ahead[data-from='{first_query}'][data-decision='1']")).to_have_count(
        1, timeout=TIMEOUT_MS)
    page.evaluate("""() => {
      const read = () => [document.querySelector('#match-facts .rz-facts')?.dataset.imageId,
                          document.querySelector("#match-candidates .rz-card[data-rank='1']")?.dataset.imageId,
                          document.querySelector('#match-header')?.innerText.match(/Animal \\d+ of \\d+/)?.[0],
                          !!document.querySelector('.rz-pair[data-ahead]'),
                          !!document.querySelector('#match-candidates[data-pending]')];
      window.rzStates = [read()];
      new MutationObserver(() => window.rzStates.push(read()))
        .observe(document.querySelector('#match-main'), {subtree: true, childList: true, characterData: true,
                                                         attributes: true});
    }""")
    page.locator("#match-same").click()
    status = page.locator("#match-status")
    expect(status).to_contain_text(f"animal #{first_query} is {first_name}", timeout=TIMEOUT_MS)
    assert assignment(data, first_query) == first_name
    # the next photo loaded at once
    expect(page.locator("#match-facts .rz-facts")).not_to_have_attribute("data-image-id", str(first_query))
    expect(page.locator("#match-header")).to_contain_text("Animal 2 of")
    expect(page.locator(".rz-pair[data-ahead], #match-candidates[data-pending]")).to_have_count(0)
    states = [tuple(x) for x in page.evaluate("window.rzStates")]
    before, after = states[0], states[-1]
    assert before[0] == str(first_query) and before[2] == "Animal 1 of " + before[2].split(" of ")[1]
    assert after[0] != before[0] and after[1] is not None and after[2].startswith("Animal 2 of")
    assert not any(before[3:] + after[3:]), states
    # in between only the next animal drawn ahead, whole (its photo, candidates and counter together), its
    # candidates marked as being ranked again after a "same"; then the server's answer
    ahead = [x for x in states if x not in (before, after)]
    assert all(x[0] == after[0] and x[2] == after[2] and x[3] and x[4] for x in ahead), states
    assert ahead, states

    # --- 2. confirm the next one with the M key (focus on the page, not in a text box)
    second_query = shown_query(page)
    _, second_name = top_candidate(page)
    assert assignment(data, second_query) is None
    page.locator("#match-facts").click()
    page.keyboard.press("m")
    expect(status).to_contain_text(f"animal #{second_query} is {second_name}", timeout=TIMEOUT_MS)
    assert assignment(data, second_query) == second_name
    # typing an M into a text box is not a decision
    third_query = shown_query(page)
    page.locator("#match-new-name input, #match-new-name textarea").first.fill("m")
    page.locator("#match-new-name input, #match-new-name textarea").first.press("m")
    time.sleep(1.0)
    assert assignment(data, third_query) is None and shown_query(page) == third_query
    page.locator("#match-new-name input, #match-new-name textarea").first.fill("")

    # --- 3. undo with the button: the second photo is unassigned again and shown again
    page.locator("#match-undo").click()
    expect(status).to_contain_text("Undone", timeout=TIMEOUT_MS)
    expect(page.locator("#match-facts .rz-facts")).to_have_attribute("data-image-id", str(second_query))
    assert assignment(data, second_query) is None
    assert assignment(data, first_query) == first_name

    # --- 4. undo with the Z key: the first photo is restored too
    page.locator("#match-facts").click()
    page.keyboard.press("z")
    expect(page.locator("#match-facts .rz-facts")).to_have_attribute("data-image-id", str(first_query),
                                                                  timeout=TIMEOUT_MS)
    wait_for(lambda: assignment(data, first_query) is None, what="the first decision to be undone")

    # --- 5. ? shows every key, Escape hides it; the photo and the candidate zoom and pan together
    page.locator("#match-facts").click()
    page.keyboard.press("?")
    helper = page.locator("#rosette-keys-help")
    expect(helper).to_be_visible()
    expect(helper).to_contain_text("same individual as the chosen candidate")
    expect(helper).to_contain_text("zoom the photo and the candidate together")
    page.keyboard.press("Escape")
    expect(helper).to_be_hidden()
    query_img, cand_img = page.locator("#match-query img"), page.locator("#match-compare img")
    expect(cand_img).to_be_visible(timeout=TIMEOUT_MS)
    box = query_img.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -200)
    page.mouse.wheel(0, -200)
    wait_for(lambda: float(query_img.get_attribute("data-zoom") or 1) > 1.2, what="the photo to zoom")
    assert query_img.get_attribute("data-zoom") == cand_img.get_attribute("data-zoom")
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] / 2 + 40, box["y"] + box["height"] / 2 + 10, steps=4)
    page.mouse.up()
    moved = query_img.evaluate("e => e.style.transform")
    assert "translate(40px, 10px)" in moved and cand_img.evaluate("e => e.style.transform") == moved
    query_img.dblclick()
    wait_for(lambda: query_img.get_attribute("data-zoom") == "1", what="the zoom to reset")
    assert cand_img.evaluate("e => e.style.transform") == ""

    # --- 6. the Catalogue tab reflects the restored state
    page.get_by_role("tab", name="Catalogue").click()
    expect(page.locator("#catalogue-history")).to_contain_text("undid", timeout=TIMEOUT_MS)
    shot("after-undo")
    assert not page.external_requests, page.external_requests


def test_two_curators_on_one_photo_the_second_is_told_not_overwritten(match_server, page, playwright_driver, shot):
    from playwright.sync_api import expect

    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, VIEWPORT

    data = match_server.data_dir
    other = playwright_driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        ben = other.new_page(viewport=VIEWPORT)
        ben.set_default_timeout(20_000)
        sign_in(ben, match_server, "ben", PASSWORD)
        page.goto(match_server.url)
        for pg in (page, ben):
            pg.get_by_role("tab", name="Match review").click()
            expect(pg.locator("#match-candidates .rz-card").first).to_be_visible(timeout=TIMEOUT_MS)
        query = shown_query(page)
        assert shown_query(ben) == query and assignment(data, query) is None
        _, ana_choice = top_candidate(page)

        page.locator("#match-same").click()  # ana decides first
        expect(page.locator("#match-status")).to_contain_text(f"animal #{query} is {ana_choice}", timeout=TIMEOUT_MS)
        ben.locator("#match-not").click()  # ben still sees the photo as unassigned
        expect(ben.locator("#match-status")).to_contain_text("Not recorded", timeout=TIMEOUT_MS)
        expect(ben.locator("#match-status")).to_contain_text("decided by ana")
        expect(ben.locator("#match-facts")).to_contain_text(f"same individual ({ana_choice}) by ana")
        assert assignment(data, query) == ana_choice  # ana's decision stands
        ben.screenshot(path=str(shot("ana").parent / "test_two_curators-ben.png"), full_page=True)
    finally:
        other.close()
    page.locator("#match-undo").click()  # leave the catalogue as it was
    expect(page.locator("#match-status")).to_contain_text("Undone", timeout=TIMEOUT_MS)
    assert assignment(data, query) is None


def test_date_filter_narrows_the_candidates_and_clearing_it_restores_them(match_server, page, shot):
    from playwright.sync_api import expect

    page.goto(match_server.url)
    page.get_by_role("tab", name="Match review").click()
    cards = page.locator("#match-candidates .rz-card")
    expect(cards.first).to_be_visible(timeout=TIMEOUT_MS)
    n_before = cards.count()
    page.locator("#match-more-filters").get_by_text("Only candidates from a place or date range").click()
    box = page.locator("#match-date-from input, #match-date-from textarea").first
    box.fill("2030-01-01")
    box.press("Enter")
    expect(page.locator("#match-candidates")).to_contain_text("with these filters", timeout=TIMEOUT_MS)
    expect(page.locator("#match-header")).to_contain_text("from 2030-01-01")
    shot("date-filtered")
    box.fill("")
    box.press("Enter")
    expect(cards).to_have_count(n_before, timeout=TIMEOUT_MS)


def _visible_error_badges(pg) -> int:
    """Gradio's red "Error" overlays shown on output components (a refused event draws one on each)."""
    return pg.evaluate("""() => [...document.querySelectorAll('[data-testid="status-tracker"] .error')]
        .filter(e => e.offsetParent !== null && getComputedStyle(e).visibility !== 'hidden').length""")


def test_a_refused_decision_leaves_the_screen_as_it_was(match_server, playwright_driver, shot):
    """A curator demoted to viewer while the review is open presses M: they are told why, and the photo, the
    candidates, the facts and the header stay as they were, with no red Error badges (issue 14, item 1)."""
    from playwright.sync_api import expect

    from db.session import open_catalogue
    from db.users import set_role
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, VIEWPORT

    browser = playwright_driver.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    try:
        # a viewer sees the decision buttons disabled, saying why; the M key decides nothing
        vic = browser.new_page(viewport=VIEWPORT)
        sign_in(vic, match_server, "vic", PASSWORD)
        vic.get_by_role("tab", name="Match review").click()
        expect(vic.locator("#match-candidates .rz-card").first).to_be_visible(timeout=TIMEOUT_MS)
        for button in ("match-same", "match-not", "match-unsure", "match-new", "match-undo"):
            expect(vic.locator(f"#{button}")).to_be_disabled()
        expect(vic.locator("#match-same")).to_have_attribute("title", re.compile("Curators only"))
        expect(vic.locator("#match-next")).to_be_enabled()  # moving through the queue only reads
        viewed = shown_query(vic)
        vic.locator("#match-facts").click()
        vic.keyboard.press("m")
        time.sleep(1.0)
        assert assignment(match_server.data_dir, viewed) is None and _visible_error_badges(vic) == 0
        shot("viewer")

        # a curator demoted while the review is open: the refusal leaves the screen as it was
        cid = browser.new_page(viewport=VIEWPORT)
        sign_in(cid, match_server, "cid", PASSWORD)
        cid.get_by_role("tab", name="Match review").click()
        expect(cid.locator("#match-candidates .rz-card").first).to_be_visible(timeout=TIMEOUT_MS)
        query = shown_query(cid)
        header = cid.locator("#match-header").inner_text()
        cat = open_catalogue(match_server.data_dir, migrate=False)
        try:
            set_role(cat, "cid", "viewer", by="ada")
        finally:
            cat.close()
        cid.locator("#match-facts").click()
        cid.keyboard.press("m")
        expect(cid.get_by_text("cid is a viewer; this needs the curator role").first).to_be_visible(timeout=TIMEOUT_MS)
        time.sleep(1.0)
        shot("refused")
        assert assignment(match_server.data_dir, query) is None
        expect(cid.locator("#match-query img")).to_be_visible()
        expect(cid.locator("#match-candidates .rz-card").first).to_be_visible()
        assert shown_query(cid) == query
        assert cid.locator("#match-header").inner_text() == header
        assert _visible_error_badges(cid) == 0
    finally:
        browser.close()
        cat = open_catalogue(match_server.data_dir, migrate=False)
        try:
            set_role(cat, "cid", "curator", by="ada")
        finally:
            cat.close()


def _one_flank_pair(data_dir: Path) -> tuple[str, str]:
    """Two of Cleo's photos made a left-flank-only and a right-flank-only individual, and a finished two-flank fit
    stored that finds them probably one animal (the job's result as the flank_density job stores it)."""
    from db.models import Flank, Image, Individual, Job, JobStatus, utcnow
    from db.session import open_catalogue

    cat = open_catalogue(data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            cleo = s.scalar(select(Individual).where(Individual.name == NAMES[2]))
            photos = list(s.scalars(select(Image).where(Image.individual_id == cleo.id).order_by(Image.id)))[:2]
            made = []
            for name, flank, photo in (("Cleo-L", Flank.left, photos[0]), ("Cleo-R", Flank.right, photos[1])):
                ind = Individual(name=name, species_id=cleo.species_id)
                s.add(ind)
                s.flush()
                photo.individual_id, photo.flank = ind.id, flank
                made.append(ind)
            row = {"left": "Cleo-L", "right": "Cleo-R", "probability": 0.82, "known": False, "distance_m": 400.0,
                   "left_occasion": 3, "right_occasion": 5, "left_individual_id": made[0].id,
                   "right_individual_id": made[1].id}
            s.add(Job(kind="flank_density", status=JobStatus.succeeded, finished_at=utcnow(), params={},
                      result={"kind": "flanks", "refused": False, "reason": None, "source": "catalogue",
                              "catalogue": {"species": "default", "occasion_days": 1.0},
                              "link_probabilities": [row]}))
            s.commit()
    finally:
        cat.close()
    return "Cleo-L", "Cleo-R"


def test_a_flank_link_the_density_fit_suggests_is_shown_with_its_evidence_and_rejected(match_server, page, shot):
    """Below the review: the links panel lists the stored fit's pair in the issue's words, with what the
    probability rests on; choosing it shows its two photos; "Not the same" records it and says so."""
    from playwright.sync_api import expect

    from db.models import FlankLinkDecision
    from db.session import open_catalogue

    left, right = _one_flank_pair(match_server.data_dir)
    page.goto(match_server.url)
    page.get_by_role("tab", name="Match review").click()
    expect(page.locator("#match-candidates .rz-card").first).to_be_visible(timeout=TIMEOUT_MS)
    page.locator("#match-links").get_by_text("Flank links the density fit suggests").click()
    sentence = (f"left-flank identity {left} and right-flank identity {right}: 0.82 probability the same animal "
                "(seen 400 m apart on nights 3 and 5)")
    expect(page.locator("#match-links-pick")).to_contain_text(sentence, timeout=TIMEOUT_MS)
    expect(page.locator("#match-links-summary")).to_contain_text("spatial model only")
    page.locator("#match-links-pick").get_by_text(sentence).click()
    expect(page.locator("#match-links-photos img")).to_have_count(2, timeout=TIMEOUT_MS)
    shot("flank-link")
    page.locator("#match-link-not").click()
    expect(page.locator("#match-links-status")).to_contain_text(
        f"Recorded: {left} and {right} are not the same animal", timeout=TIMEOUT_MS)
    expect(page.locator("#match-links-pick")).not_to_contain_text(sentence)
    cat = open_catalogue(match_server.data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            answers = [(r.decision.value, r.user, r.probability) for r in s.scalars(select(FlankLinkDecision))]
    finally:
        cat.close()
    assert answers == [("rejected", "ana", 0.82)]
