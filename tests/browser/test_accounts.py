"""Sign-in and roles on the served app: the login door, server-side role checks on the API and in the browser,
the acting user taken from the session (a forged name in the payload changes nothing), and the Audit tab."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import closing

import pytest

from tests.browser.conftest import RosetteServer, choose, require_chromium, sign_in, start_rosette
from tests.synthetic_reid import make_reid_set

PASSWORD = "s3cret-enough"
TIMEOUT_MS = 45_000


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[RosetteServer]:
    require_chromium()
    from db.io.ingest import ingest_path
    from db.session import open_catalogue
    from db.users import add_user

    root = tmp_path_factory.mktemp("accounts")
    manifest = make_reid_set(root / "photos", individuals=2, photos_each=2, seed=3)
    cat = open_catalogue(root / "rosette-data")
    ingest_path(cat, manifest, format="manifest", user="seed")
    add_user(cat, "ada", PASSWORD, role="admin", by="setup")
    add_user(cat, "cora", PASSWORD, role="curator", by="ada")
    add_user(cat, "vera", PASSWORD, role="viewer", by="ada")
    from db import catalogue as ops
    from db.audit import acting_as

    with acting_as("ada"), cat.unit_of_work() as s:  # a change for the API test to undo
        ops.rename_individual(s, _id_in(s, "ind00"), "Amber", user="ada")
        s.commit()
    cat.close()
    srv = start_rosette(root / "rosette-data", sign_in=True)
    try:
        yield srv
    finally:
        srv.stop()


def _id_in(s, name: str) -> int | None:
    from sqlalchemy import select

    from db.models import Individual

    return s.scalar(select(Individual.id).where(Individual.name == name))


def _individual_id(server: RosetteServer, name: str) -> int:
    from sqlalchemy import select

    from db.models import Individual
    from db.session import open_catalogue

    cat = open_catalogue(server.data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            return s.scalar(select(Individual.id).where(Individual.name == name))
    finally:
        cat.close()


def _call(client, server: RosetteServer, api_name: str, data: list) -> tuple[str, object]:
    """POST a Gradio API call and read its event stream; returns ("complete"|"error", payload)."""
    posted = client.post(f"{server.url}gradio_api/call/{api_name}", json={"data": data})
    if posted.status_code != 200:
        return f"http {posted.status_code}", posted.text
    event_id = posted.json()["event_id"]
    stream = client.get(f"{server.url}gradio_api/call/{api_name}/{event_id}", timeout=60)
    kind, payload = None, None
    for line in stream.text.splitlines():
        if line.startswith("event:"):
            kind = line.split(":", 1)[1].strip()
        elif line.startswith("data:") and kind in ("complete", "error"):
            payload = json.loads(line.split(":", 1)[1]) if line.split(":", 1)[1].strip() not in ("", "null") else None
    return kind, payload


def _client(server: RosetteServer, name: str | None, password: str = PASSWORD):
    import httpx

    client = httpx.Client(timeout=30)
    if name is not None:
        reply = client.post(f"{server.url}login", data={"username": name, "password": password})
        assert reply.status_code == 200 and reply.json().get("success"), reply.text
    return client


def test_the_api_needs_sign_in_checks_roles_and_takes_the_user_from_the_session(server):
    import httpx
    from sqlalchemy import select

    from db.audit import audit_rows
    from db.models import IdentityEvent
    from db.session import open_catalogue

    thumb = next((server.data_dir / "thumbs").rglob("*.*"))
    with httpx.Client(timeout=30) as anonymous:
        kind, _ = _call(anonymous, server, "undo_last_change", [None, None])
        assert kind == "http 401"
        # the photos, the app's config and uploads are behind the door too
        assert anonymous.get(f"{server.url}gradio_api/file={thumb}").status_code == 401
        assert anonymous.get(f"{server.url}config").status_code == 401
        assert anonymous.post(f"{server.url}gradio_api/upload", files={"files": thumb.read_bytes()}).status_code == 401
        wrong = anonymous.post(f"{server.url}login", data={"username": "cora", "password": "guess-guess"})
        assert wrong.status_code != 200 or not wrong.json().get("success")
    with closing(_client(server, "vera")) as viewer:
        kind, payload = _call(viewer, server, "undo_last_change", [None, None])
        assert kind == "error" and "vera is a viewer" in json.dumps(payload), payload
        kind, payload = _call(viewer, server, "compute_features", [])
        assert kind == "error" and "this needs the curator role" in json.dumps(payload), payload
        kind, payload = _call(viewer, server, "audit_trail", ["anyone", "", "", "", ""])
        assert kind == "complete"  # viewers may read the trail
        assert viewer.get(f"{server.url}gradio_api/file={thumb}").status_code == 200
    assert _individual_id(server, "Amber") is not None  # the viewer changed nothing
    with closing(_client(server, "cora")) as curator:
        # the attack from the issue: POST undo_last_change {"data": [null, "mallory"]}. The acting-user slot is a
        # server-side State, so the payload's value is never used: the session's name is recorded
        kind, payload = _call(curator, server, "undo_last_change", [None, "mallory"])
        assert kind == "complete", payload
        kind, payload = _call(curator, server, "add_account", ["mallory", "password-123", "admin", None])
        assert kind == "error" and "cora is a curator; this needs the admin role" in json.dumps(payload), payload
    assert _individual_id(server, "ind00") is not None  # the rename was undone
    cat = open_catalogue(server.data_dir, migrate=False)
    try:
        with cat.unit_of_work() as s:
            undo = s.scalars(select(IdentityEvent).order_by(IdentityEvent.id.desc())).first()
            assert (undo.kind.value, undo.user) == ("undo", "cora")
        assert {(r.action, r.user) for r in audit_rows(cat, action="history.undo")} == {("history.undo", "cora"), ("history.undone", "cora")}
        assert not audit_rows(cat, user="mallory") and not audit_rows(cat, user="vera")
    finally:
        cat.close()


# Counts the animation frames the page asks for, installed before any of Gradio's scripts keeps a reference.
FRAMES_JS = """
window.__rzFrames = 0;
const askFrame = window.requestAnimationFrame.bind(window);
window.requestAnimationFrame = (cb) => { window.__rzFrames += 1; return askFrame(cb); };
"""


def test_browser_sign_in_a_viewer_is_refused_a_curator_renames_and_the_audit_tab_shows_who(server, page, shot):
    from playwright.sync_api import expect

    page.add_init_script(FRAMES_JS)
    page.goto(server.url)
    expect(page.get_by_role("button", name="Login")).to_be_visible(timeout=TIMEOUT_MS)  # the door
    shot("login")
    sign_in(page, server, "vera", PASSWORD)
    expect(page.locator("#rosette-identity")).to_contain_text("(viewer)")
    # an idle page asks for no frames: Gradio's status tracker kept a 60-a-second loop alive for the page's life
    # (app.gradio_assets); within 15 s of sign-in a half second passes with none
    page.wait_for_function("""() => new Promise(done => { const n = window.__rzFrames;
        setTimeout(() => done(window.__rzFrames === n), 500); })""", timeout=15_000, polling=100)
    page.get_by_role("tab", name="People").click()
    page.get_by_role("tab", name="Accounts").click()
    expect(page.locator("#accounts-notice")).to_contain_text("Only admins manage accounts", timeout=TIMEOUT_MS)
    expect(page.locator("#accounts-table")).not_to_contain_text("cora")
    page.get_by_role("tab", name="Catalogue").click()
    choose(page, "catalogue-open", "ind01")
    box = page.locator("#catalogue-new-name input, #catalogue-new-name textarea").first
    expect(box).to_have_value("ind01", timeout=TIMEOUT_MS)
    box.fill("Viewer rename")
    # the buttons that change things are disabled for a viewer, with a tooltip saying why (issue 14, item 1)
    rename_button = page.locator("#catalogue-rename")
    expect(rename_button).to_be_disabled(timeout=TIMEOUT_MS)
    expect(rename_button).to_have_attribute("title", re.compile("Curators only"), timeout=TIMEOUT_MS)
    expect(page.locator("#catalogue-open input, #catalogue-open textarea").first).to_be_enabled()  # reading is not
    # Enter in the name box still asks the server, which refuses and says why
    box.press("Enter")
    expect(page.get_by_text("vera is a viewer; this needs the curator role").first).to_be_visible(timeout=TIMEOUT_MS)
    shot("viewer-refused")
    assert _individual_id(server, "Viewer rename") is None

    # sign out ends the session in this tab and shows the sign-in page here, no new tab (issue 14, item 2)
    page.locator("#rosette-sign-out").click()
    expect(page.get_by_role("button", name="Login")).to_be_visible(timeout=TIMEOUT_MS)
    assert len(page.context.pages) == 1
    page.goto(server.url)
    expect(page.get_by_role("button", name="Login")).to_be_visible(timeout=TIMEOUT_MS)  # the session is over
    sign_in(page, server, "cora", PASSWORD)
    page.get_by_role("tab", name="Catalogue").click()
    choose(page, "catalogue-open", "ind01")
    box = page.locator("#catalogue-new-name input, #catalogue-new-name textarea").first
    expect(box).to_have_value("ind01", timeout=TIMEOUT_MS)
    box.fill("Bela")
    page.locator("#catalogue-rename").click()
    expect(page.locator("#catalogue-rename-status")).to_contain_text("Renamed ind01 to Bela", timeout=TIMEOUT_MS)

    page.get_by_role("tab", name="People").click()
    page.get_by_role("tab", name="Audit trail").click()
    page.locator("#audit-action input, #audit-action textarea").first.fill("individual.rename")
    page.locator("#audit-show").click()
    table = page.locator("#audit-table")
    expect(table).to_contain_text("Bela", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("cora")
    expect(page.locator("#audit-summary")).to_contain_text("hash chain intact")
    page.locator("#audit-export").click()
    expect(page.locator("#audit-csv a").first).to_be_visible(timeout=TIMEOUT_MS)
    shot("audit")


def test_an_admin_adds_an_account_in_the_browser_and_it_can_sign_in(server, page):
    from playwright.sync_api import expect

    from db.session import open_catalogue
    from db.users import authenticate

    sign_in(page, server, "ada", PASSWORD)
    page.get_by_role("tab", name="People").click()
    page.get_by_role("tab", name="Accounts").click()
    table = page.locator("#accounts-table")
    expect(table).to_contain_text("cora", timeout=TIMEOUT_MS)
    page.locator("#accounts-name input").fill("dan")
    page.locator("#accounts-password input").fill("dans-password")
    choose(page, "accounts-role", "viewer")
    page.locator("#accounts-add").click()
    expect(page.locator("#accounts-status")).to_contain_text("Account dan added as viewer", timeout=TIMEOUT_MS)
    expect(table).to_contain_text("dan", timeout=TIMEOUT_MS)
    cat = open_catalogue(server.data_dir, migrate=False)
    try:
        assert authenticate(cat, "dan", "dans-password")
    finally:
        cat.close()
    page.context.clear_cookies()
    sign_in(page, server, "dan", "dans-password")
    expect(page.locator("#rosette-identity")).to_contain_text("(viewer)")
