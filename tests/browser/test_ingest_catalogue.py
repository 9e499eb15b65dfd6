"""End to end in a real browser: upload photos with a manifest, browse, rename and undo."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from db.session import open_catalogue
from jobs.actions.catalogue import individual_cards, rename
from jobs.requests.catalogue import RenameRequest
from tests.browser.conftest import choose

TIMEOUT_MS = 30_000


@pytest.fixture()
def two_photos(nyala_dir, nyala_manifest, tmp_path):
    """Two nyala photos of different animals and a manifest naming them (with flank and sighting)."""
    first = nyala_manifest[0]
    second = next(r for r in nyala_manifest if r["identity"] != first["identity"])
    rows = [(first, "Tawny Ayo"), (second, "Tawny Bela")]
    paths = [shutil.copy(nyala_dir / "images" / r["filename"], tmp_path / r["filename"]) for r, _ in rows]
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("filename,identity,flank,sighting\n"
                        + "".join(f"{r['filename']},{name},{r['flank']},{r['sighting']}\n" for r, name in rows))
    return {"paths": [str(p) for p in paths], "manifest": str(manifest), "rows": rows}


def upload(page, elem_id: str, paths: list[str]) -> None:
    """Choose files in a gr.File and wait until every one is uploaded (its download link is shown)."""
    from playwright.sync_api import expect

    page.locator(f"#{elem_id} input[type=file]").set_input_files(paths)
    for path in paths:
        name = Path(path).name
        expect(page.locator(f'#{elem_id} a[href$="/{name}"]')).to_have_count(1, timeout=TIMEOUT_MS)


def _textbox(page, elem_id: str):
    return page.locator(f"#{elem_id} textarea, #{elem_id} input").first


def test_upload_with_manifest_then_browse_rename_and_undo(rosette_server, page, shot, two_photos):
    from playwright.sync_api import expect

    (first, ayo), (second, bela) = two_photos["rows"]
    page.goto(rosette_server.url)
    expect(page.get_by_role("tab", name="Ingest")).to_be_visible(timeout=TIMEOUT_MS)

    # --- upload two photos and the manifest, import
    upload(page, "ingest-files", two_photos["paths"])
    upload(page, "ingest-manifest", [two_photos["manifest"]])
    _textbox(page, "ingest-species").fill("Tragelaphus angasii")  # named, so the catalogue export below may leave
    page.locator("#ingest-import").click()
    expect(page.locator("#ingest-summary")).to_contain_text("2 imported", timeout=TIMEOUT_MS)
    report = page.locator("#ingest-report")
    for r in (first, second):
        expect(report).to_contain_text(r["filename"])
    expect(report).to_contain_text(f"-> {ayo}")
    expect(report).to_contain_text(f"-> {bela}")
    shot("ingest-report")

    # --- the catalogue shows both individuals with their counts
    page.get_by_role("tab", name="Catalogue").click()
    overview = page.locator("#catalogue-individuals")
    expect(overview).to_contain_text(f"{ayo} (1 photo, 1 sighting)", timeout=TIMEOUT_MS)
    expect(overview).to_contain_text(f"{bela} (1 photo, 1 sighting)")
    expect(page.locator("#catalogue-summary")).to_contain_text("2 individuals · 2 photos")
    # the cover pictures are real images served by the app
    covers = overview.locator("img")
    expect(covers).to_have_count(2)
    page.wait_for_function("() => [...document.querySelectorAll('#catalogue-individuals img')]"
                           ".every(i => i.complete && i.naturalWidth > 0)", timeout=TIMEOUT_MS)
    shot("catalogue")

    # --- open Ayo from the overview: its photo with flank and sighting
    overview.get_by_text(f"{ayo} (1 photo").click()
    headline = page.locator("#catalogue-headline")
    expect(headline).to_contain_text(f"{ayo}: 1 photo, 1 sighting", timeout=TIMEOUT_MS)
    photos = page.locator("#catalogue-photos")
    expect(photos).to_contain_text(f"{first['flank']} flank", timeout=TIMEOUT_MS)
    expect(photos).to_contain_text(f"sighting {first['sighting']}")
    expect(page.locator("#catalogue-sightings")).to_contain_text(first["sighting"])
    expect(_textbox(page, "catalogue-new-name")).to_have_value(ayo)

    # --- rename, see the new name everywhere, then undo
    new_name = "Tawny Ayo Renamed"
    _textbox(page, "catalogue-new-name").fill(new_name)
    page.locator("#catalogue-rename").click()
    # the answer stands beside the button that caused it
    expect(page.locator("#catalogue-rename-status")).to_contain_text(f"Renamed {ayo} to {new_name}.",
                                                                    timeout=TIMEOUT_MS)
    expect(headline).to_contain_text(f"{new_name}: 1 photo", timeout=TIMEOUT_MS)
    expect(overview).to_contain_text(f"{new_name} (1 photo, 1 sighting)", timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-history")).to_contain_text(f"renamed {ayo} to {new_name}")
    shot("renamed")

    page.locator("#catalogue-undo").click()
    expect(page.locator("#catalogue-status")).to_contain_text(f"Undone: renamed {ayo} to {new_name}.",
                                                             timeout=TIMEOUT_MS)
    expect(headline).to_contain_text(f"{ayo}: 1 photo", timeout=TIMEOUT_MS)
    expect(headline).not_to_contain_text("Renamed")
    expect(overview).to_contain_text(f"{ayo} (1 photo, 1 sighting)", timeout=TIMEOUT_MS)
    expect(overview).not_to_contain_text(new_name)
    expect(page.locator("#catalogue-history")).to_contain_text("(undone)")

    # --- a name that looks like markup is shown as text, never drawn (issue 14, item 18)
    evil = "<img src=x onerror=alert(1)> Bad_*Name*"
    _textbox(page, "catalogue-new-name").fill(evil)
    page.locator("#catalogue-rename").click()
    expect(page.locator("#catalogue-rename-status")).to_contain_text(f"Renamed {ayo} to {evil}.", timeout=TIMEOUT_MS)
    expect(headline).to_contain_text(f"{evil}: 1 photo", timeout=TIMEOUT_MS)
    for where in ("#catalogue-headline", "#catalogue-rename-status"):
        expect(page.locator(f"{where} img")).to_have_count(0)
        expect(page.locator(f"{where} em, {where} strong")).to_have_count(0)
    shot("markup-name")
    page.locator("#catalogue-undo").click()
    expect(headline).to_contain_text(f"{ayo}: 1 photo", timeout=TIMEOUT_MS)

    # --- another curator renames Bela while this page shows the undo as the newest change: Undo here undoes
    # nothing and names the newer change; the history is shown again and the next press undoes that change
    other = open_catalogue(rosette_server.data_dir, migrate=False)
    try:
        bela_id = next(c.id for c in individual_cards(other) if c.name == bela)
        rename(other, RenameRequest(bela_id, "Bela Elsewhere", user="bia"))
    finally:
        other.close()
    page.locator("#catalogue-undo").click()
    expect(page.get_by_text(re.compile("a newer change was made since you looked"))).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-history")).to_contain_text(f"renamed {bela} to Bela Elsewhere", timeout=TIMEOUT_MS)
    expect(headline).to_contain_text(f"{ayo}: 1 photo")  # nothing undone
    page.locator("#catalogue-undo").click()
    expect(page.locator("#catalogue-status")).to_contain_text(f"Undone: renamed {bela} to Bela Elsewhere.",
                                                             timeout=TIMEOUT_MS)
    # the refresh after the undo has landed (it also writes the name box: a fill before it would be overwritten)
    expect(page.locator("#catalogue-history")).to_contain_text(f"renamed {bela} to Bela Elsewhere (undone)",
                                                              timeout=TIMEOUT_MS)

    # --- the whole catalogue as CSV and sheets, downloadable
    page.locator("#catalogue-export").click()
    expect(page.locator("#catalogue-export-status")).to_contain_text("Exported 2 individuals, 2 photos",
                                                                    timeout=TIMEOUT_MS)
    expect(page.locator('#catalogue-export-file a[href$=".zip"]')).to_have_count(1, timeout=TIMEOUT_MS)

    # --- a curator mistake shows a message, not a stack trace
    _textbox(page, "catalogue-new-name").fill(bela)
    page.locator("#catalogue-rename").click()
    expect(page.get_by_text(re.compile("already exists"))).to_be_visible(timeout=TIMEOUT_MS)
    expect(page.get_by_text("Traceback")).to_have_count(0)
    shot("undone")

    assert page.external_requests == [], f"the page tried to reach the internet: {page.external_requests}"


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory):
    """A server on its own fresh data directory, started WITH the demo catalogue (first start seeds it)."""
    from tests.browser.conftest import require_chromium, start_rosette

    require_chromium()
    server = start_rosette(tmp_path_factory.mktemp("demo") / "rosette-data", demo=True)
    try:
        yield server
    finally:
        server.stop()


def test_demo_catalogue_merge_and_split_with_undo(demo_server, page, shot):
    from playwright.sync_api import expect

    page.goto(demo_server.url)
    page.get_by_role("tab", name="Catalogue").click()
    overview = page.locator("#catalogue-individuals")
    expect(page.locator("#catalogue-summary")).to_contain_text("10 individuals · 60 photos", timeout=TIMEOUT_MS)
    expect(overview.locator("img")).to_have_count(10, timeout=TIMEOUT_MS)
    expect(overview).to_contain_text("nyala_60 (6 photos")
    headline = page.locator("#catalogue-headline")
    status = page.locator("#catalogue-status")  # beside Undo: the undo's answers
    split_status = page.locator("#catalogue-split-status")  # beside the ticked photos' buttons

    # --- merge nyala_60 into nyala_61, then undo
    overview.get_by_text("nyala_60 (6 photos").click()
    expect(headline).to_contain_text("nyala_60: 6 photos", timeout=TIMEOUT_MS)
    choose(page, "catalogue-merge-target", "nyala_61 (")
    page.locator("#catalogue-merge").click()
    expect(page.locator("#catalogue-merge-status")).to_contain_text("Merged nyala_60 into nyala_61 (6 photos moved).",
                                                                   timeout=TIMEOUT_MS)
    expect(headline).to_contain_text("nyala_61: 12 photos", timeout=TIMEOUT_MS)
    expect(overview.locator("img")).to_have_count(9, timeout=TIMEOUT_MS)
    expect(overview).not_to_contain_text("nyala_60 (")
    shot("merged")
    page.locator("#catalogue-undo").click()
    expect(status).to_contain_text("Undone: merged nyala_60 into nyala_61", timeout=TIMEOUT_MS)
    expect(overview.locator("img")).to_have_count(10, timeout=TIMEOUT_MS)
    expect(overview).to_contain_text("nyala_60 (6 photos")
    expect(headline).to_contain_text("nyala_61: 6 photos", timeout=TIMEOUT_MS)

    # --- split two photos of nyala_61 into a new individual, then undo
    picks = page.locator("#catalogue-split-pick label")
    expect(picks).to_have_count(6, timeout=TIMEOUT_MS)
    picks.nth(0).click()
    picks.nth(1).click()
    _textbox(page, "catalogue-split-name").fill("nyala_61 calf")
    page.locator("#catalogue-split").click()
    expect(split_status).to_contain_text("Split 2 photos out into the new individual nyala_61 calf.",
                                         timeout=TIMEOUT_MS)
    expect(overview).to_contain_text("nyala_61 calf (2 photos", timeout=TIMEOUT_MS)
    expect(headline).to_contain_text("nyala_61: 4 photos", timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-history")).to_contain_text("split 2 photos out into nyala_61 calf")
    shot("split")
    page.locator("#catalogue-undo").click()
    expect(status).to_contain_text("Undone: split 2 photos out into nyala_61 calf", timeout=TIMEOUT_MS)
    expect(overview).not_to_contain_text("nyala_61 calf", timeout=TIMEOUT_MS)
    expect(headline).to_contain_text("nyala_61: 6 photos", timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-summary")).to_contain_text("10 individuals · 60 photos")

    # --- tick two photos: set their flank together, move them to another individual, undo one move
    expect(picks).to_have_count(6, timeout=TIMEOUT_MS)
    picks.nth(0).click()
    picks.nth(1).click()
    choose(page, "catalogue-bulk-flank", "front")
    page.locator("#catalogue-set-flanks").click()
    expect(split_status).to_contain_text("Flank set to front for 2 photos.", timeout=TIMEOUT_MS)
    # the refresh that follows the change re-renders the ticks and the "Merge into" choices: let it land before
    # choosing (a choice made while it is in flight can be overwritten, as a curator would see)
    expect(picks.nth(0)).to_contain_text("front flank", timeout=TIMEOUT_MS)
    expect(picks.nth(1)).to_contain_text("front flank", timeout=TIMEOUT_MS)
    # the bulk action done, its ticks are cleared: tick the two photos again for the move
    expect(page.locator("#catalogue-split-pick input:checked")).to_have_count(0, timeout=TIMEOUT_MS)
    shot("ticks-cleared")
    picks.nth(0).click()
    picks.nth(1).click()
    expect(page.locator("#catalogue-split-pick input:checked")).to_have_count(2, timeout=TIMEOUT_MS)
    choose(page, "catalogue-merge-target", "nyala_60 (")
    page.locator("#catalogue-move").click()
    expect(split_status).to_contain_text("Moved 2 photos to nyala_60", timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-split-pick input:checked")).to_have_count(0, timeout=TIMEOUT_MS)
    expect(headline).to_contain_text("nyala_61: 4 photos", timeout=TIMEOUT_MS)
    page.locator("#catalogue-undo").click()
    expect(status).to_contain_text("Undone: assigned animal", timeout=TIMEOUT_MS)
    expect(headline).to_contain_text("nyala_61: 5 photos", timeout=TIMEOUT_MS)

    # --- search narrows the overview
    _textbox(page, "catalogue-search").fill("nyala_9")
    expect(overview.locator("img")).to_have_count(2, timeout=TIMEOUT_MS)
    expect(overview).to_contain_text("nyala_90 (")
    expect(overview).to_contain_text("nyala_96 (")
    _textbox(page, "catalogue-search").fill("")
    expect(overview.locator("img")).to_have_count(10, timeout=TIMEOUT_MS)

    # --- the history records who did what
    expect(page.locator("#catalogue-history")).to_contain_text("merged nyala_60 into nyala_61 (6 photos) (undone)")
    assert page.external_requests == [], f"the page tried to reach the internet: {page.external_requests}"
