"""Accounts, roles, the handler guard and the hash-chained audit trail (no browser: the server-side checks)."""

from __future__ import annotations

import io
import sqlite3
from types import SimpleNamespace

import pytest

from db import catalogue as ops
from db.audit import acting_as, audit_csv, audit_rows, verify_chain
from db.catalogue import CatalogueError
from db.models import Image, Role, User
from db.session import open_catalogue
from db.users import (
    PermissionDenied,
    add_user,
    authenticate,
    ensure_first_admin,
    list_users,
    require_role,
    role_allows,
    role_of,
    set_active,
    set_password,
    set_role,
)

PASSWORD = "correct horse"


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


@pytest.fixture()
def people(cat):
    add_user(cat, "ada", PASSWORD, role="admin", by="test")
    add_user(cat, "cora", PASSWORD, role="curator", by="ada")
    add_user(cat, "vera", PASSWORD, role="viewer", by="ada")
    return cat


# --------------------------------------------------------------------------- accounts


def test_passwords_are_stored_as_salted_argon2id_hashes_and_checked(people):
    with people.unit_of_work() as s:
        hashes = {u.name: u.password_hash for u in s.query(User)}
    assert all(h.startswith("$argon2id$") for h in hashes.values())
    assert PASSWORD not in "".join(hashes.values())
    assert len(set(hashes.values())) == 3  # same password, different salts
    assert authenticate(people, "cora", PASSWORD)
    assert not authenticate(people, "cora", PASSWORD + "!")
    assert not authenticate(people, "nobody", PASSWORD)
    assert not authenticate(people, "cora", "")
    set_password(people, "cora", "another secret", by="ada")
    assert not authenticate(people, "cora", PASSWORD) and authenticate(people, "cora", "another secret")


def test_bad_names_passwords_and_roles_are_refused_clearly(cat):
    with pytest.raises(ValueError, match="at least 8"):
        add_user(cat, "ana", "short", by="t")
    with pytest.raises(ValueError, match="not a usable user name"):
        add_user(cat, "ana\x1b[31m", PASSWORD, by="t")
    with pytest.raises(ValueError, match="not a usable user name"):
        add_user(cat, "=cmd|x", PASSWORD, by="t")
    with pytest.raises(ValueError, match="unknown role 'owner'"):
        add_user(cat, "ana", PASSWORD, role="owner", by="t")
    add_user(cat, "ana", PASSWORD, by="t")
    with pytest.raises(CatalogueError, match="already exists"):
        add_user(cat, "ana", PASSWORD, by="t")
    assert [a.name for a in list_users(cat)] == ["ana"]


def test_role_order_and_the_last_admin_is_kept(people):
    assert role_allows(Role.admin, Role.curator) and role_allows("curator", "viewer")
    assert not role_allows(Role.viewer, Role.curator) and not role_allows(Role.curator, Role.admin)
    with pytest.raises(CatalogueError, match="last admin"):
        set_role(people, "ada", "curator", by="ada")
    with pytest.raises(CatalogueError, match="last admin"):
        set_active(people, "ada", False, by="ada")
    set_role(people, "cora", "admin", by="ada")
    set_role(people, "ada", "viewer", by="cora")
    assert role_of(people, "ada") == Role.viewer


def test_disabled_accounts_and_history_only_names_cannot_act(people):
    with people.unit_of_work() as s:
        ops.create_individual(s, "Amber", user="old-name")  # a name from the history: no password
        s.commit()
    assert role_of(people, "old-name") is None and not authenticate(people, "old-name", "")
    set_active(people, "cora", False, by="ada")
    assert not authenticate(people, "cora", PASSWORD)
    with pytest.raises(PermissionDenied, match="Sign in first"):
        require_role(people, "cora", Role.viewer)
    with pytest.raises(PermissionDenied, match="vera is a viewer; this needs the curator role"):
        require_role(people, "vera", Role.curator)


def test_first_admin_from_the_environment_or_printed_once(data_dir, tmp_path):
    cat = open_catalogue(data_dir)
    message = ensure_first_admin(cat, environ={})
    password = message.split("password ")[1].split()[0]
    assert "shown only this once" in message and authenticate(cat, "admin", password)
    assert ensure_first_admin(cat, environ={}) is None  # never again
    cat.close()
    other = open_catalogue(tmp_path / "other")
    assert "ROSETTE_ADMIN_PASSWORD" in ensure_first_admin(other, environ={"ROSETTE_ADMIN_PASSWORD": PASSWORD})
    assert role_of(other, "admin") == Role.admin and authenticate(other, "admin", PASSWORD)
    other.close()


def test_accounts_added_from_the_shell_before_the_first_serve_never_leave_no_admin(data_dir, monkeypatch, capsys):
    """`rosette users add ana --role curator` on a new catalogue first makes the admin (with
    $ROSETTE_ADMIN_PASSWORD when set) and says so; serve then finds an admin and prints nothing more
    (issue 14, item 20)."""
    from app.cli import main

    monkeypatch.setenv("ROSETTE_ADMIN_PASSWORD", PASSWORD)
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["--data-dir", str(data_dir), "users", "add", "ana", "--role", "curator", "--password-stdin"]) == 0
    out = capsys.readouterr().out
    assert "first admin account 'admin' created with the password from $ROSETTE_ADMIN_PASSWORD" in out
    assert "account 'ana' added as curator" in out
    cat = open_catalogue(data_dir)
    assert role_of(cat, "admin") == Role.admin and authenticate(cat, "admin", PASSWORD)
    assert ensure_first_admin(cat, environ={}) is None  # what serve calls: an admin exists
    cat.close()


def test_the_first_admin_takes_a_free_name(data_dir):
    """A curator already called "admin" (no admin role): the first admin is "admin2"."""
    cat = open_catalogue(data_dir)
    add_user(cat, "admin", PASSWORD, role=Role.curator, by="ops")
    message = ensure_first_admin(cat, environ={"ROSETTE_ADMIN_PASSWORD": PASSWORD})
    assert "'admin2'" in message and role_of(cat, "admin2") == Role.admin and role_of(cat, "admin") == Role.curator
    cat.close()


# --------------------------------------------------------------------------- the handler guard


@pytest.fixture()
def guard(people, monkeypatch):
    from app import ui_base as ui  # the guard's module (app.ui, the shell, re-exports it)

    monkeypatch.setattr(ui, "_POLICY", ui.AccessPolicy(catalogue=people))
    return ui


def test_the_guard_checks_the_role_of_the_signed_in_user_on_every_call(guard, people):
    import gradio as gr

    @guard.curator_action
    def decide(photo, user):
        return f"{photo} decided by {user}"

    @guard.curator_action(role=Role.viewer)
    def look(photo):
        return f"looking at {photo}"

    session_user = guard.SessionUser()
    assert decide(SimpleNamespace(username="cora"), 7, session_user) == "7 decided by cora"
    assert look(SimpleNamespace(username="vera"), 7) == "looking at 7"
    with pytest.raises(gr.Error, match="vera is a viewer"):
        decide(SimpleNamespace(username="vera"), 7, session_user)
    with pytest.raises(gr.Error, match="Sign in first"):
        look(SimpleNamespace(username=None), 7)
    with pytest.raises(gr.Error, match="Sign in first"):
        look(None, 7)
    set_role(people, "cora", "viewer", by="ada")  # a role change applies to the very next call
    with pytest.raises(gr.Error, match="cora is a viewer"):
        decide(SimpleNamespace(username="cora"), 7, session_user)


def test_the_acting_user_comes_from_the_session_and_changes_are_audited_under_it(guard, people):
    @guard.curator_action
    def rename(user):
        with people.unit_of_work() as s:
            ind = ops.create_individual(s, "Amber", user=user)
            ops.rename_individual(s, ind.id, "Amberly", user=user)
            s.commit()
        return user

    @guard.curator_action(role=Role.viewer)
    def outer(user):  # a viewer-level handler calling a curator-level one: checked again, same user
        return rename(user)

    got = rename(SimpleNamespace(username="cora"), guard.SessionUser())
    assert got == "cora" and isinstance(got, guard.ActingUser)
    rows = audit_rows(people, action="individual")
    assert {(r.user, r.action) for r in rows} >= {("cora", "individual.add"), ("cora", "individual.rename")}
    import gradio as gr

    with pytest.raises(gr.Error, match="vera is a viewer"):
        outer(SimpleNamespace(username="vera"), guard.SessionUser())


@pytest.mark.slow  # imports every tab
def test_every_handler_the_app_registers_is_guarded(cat):
    from app.ui import build_app

    demo = build_app(cat)
    fns = list(demo.fns.values()) if isinstance(demo.fns, dict) else list(demo.fns)
    unguarded = [getattr(f.fn, "__qualname__", f.fn) for f in fns if f.fn is not None
                 and not hasattr(f.fn, "__rosette_role__")]
    assert not unguarded, unguarded
    roles = {f.api_name: f.fn.__rosette_role__ for f in fns if f.fn is not None}
    assert roles["decide_same"] == Role.curator and roles["undo_last_change"] == Role.curator
    assert roles["promote_model"] == Role.admin and roles["train_model"] == Role.admin
    # a viewer sees every button whose handler needs more disabled: read from the handlers, strictest wins
    from app.ui import role_locks

    locks = {lock.button.elem_id: lock.needed for lock in role_locks(demo)}
    assert locks["match-same"] == locks["catalogue-rename"] == locks["catalogue-undo"] == Role.curator
    assert locks["accounts-add"] == Role.admin
    assert not {"match-next", "audit-show", "catalogue-open"} & set(locks), locks  # reading stays open
    # the acting user is a server-side State: no public endpoint takes a user name
    info = demo.get_api_info()
    for name, endpoint in info["named_endpoints"].items():
        assert not any("user" in (p.get("parameter_name") or "").lower() for p in endpoint["parameters"]), name


# --------------------------------------------------------------------------- the audit trail


def _photo(s, k: int, individual_id=None) -> Image:
    img = Image(content_hash=f"h{k}", original_name=f"p{k}.jpg", blob_path=f"images/h{k}.jpg", format="JPEG",
                mode="RGB", width=4, height=4, size_bytes=1, individual_id=individual_id)
    s.add(img)
    return img


def test_each_kind_of_change_is_audited_with_who_and_what(cat):
    from db.identify.matching import record_decision

    with acting_as("ana"), cat.unit_of_work() as s:
        amber = ops.create_individual(s, "Amber", user="ana")
        _photo(s, 1, amber.id)
        _photo(s, 2)
        s.commit()
    with acting_as("ben"):
        record_decision(cat, query_image_id=2, decision="same", user="ben", candidate_image_id=1)
        with cat.unit_of_work() as s:
            s.get(Image, 1).flank = "left"
            s.commit()
    rows = audit_rows(cat)
    by_action = {r.action: r for r in rows}
    assert by_action["individual.add"].user == "ana" and by_action["individual.add"].details["name"] == "Amber"
    assert by_action["photo.import"].user == "ana"
    assert by_action["decision.add"].user == "ben" and by_action["decision.add"].details["decision"] == "same"
    assert by_action["photo.flank"].details == {"flank": ["unknown", "left"]}
    assert by_action["photo.flank"].target == "photo#1"
    # filters: user, action prefix, target, dates
    assert {r.user for r in audit_rows(cat, user="ben")} == {"ben"}
    assert all(r.action.startswith("photo.") for r in audit_rows(cat, action="photo"))
    assert {r.target for r in audit_rows(cat, target="photo#1")} == {"photo#1"}
    assert audit_rows(cat, since="2999-01-01") == [] and len(audit_rows(cat, until="2999-01-01")) == len(rows)
    with pytest.raises(ValueError, match="must be a date like"):
        audit_rows(cat, since="yesterday")


def test_a_change_rolled_back_leaves_no_audit_row(cat):
    with acting_as("ana"), cat.unit_of_work() as s:
        ops.create_individual(s, "Ghost", user="ana")
        s.flush()
        # not committed: the unit of work rolls the change and its audit row back together
    assert audit_rows(cat) == []


def test_the_hash_chain_shows_a_rewritten_or_deleted_row(cat):
    with acting_as("ana"), cat.unit_of_work() as s:
        for k in range(4):
            ops.create_individual(s, f"Animal {k}", user="ana")
            s.commit()
    assert verify_chain(cat).ok and verify_chain(cat).rows == 8  # individual.add + history.create each
    db = sqlite3.connect(cat.data_dir / "catalogue.db")
    db.execute("UPDATE audit_events SET user = 'mallory' WHERE id = 2")
    db.commit()
    check = verify_chain(cat)
    assert not check.ok and check.first_broken_id == 2
    db.execute("UPDATE audit_events SET user = 'ana' WHERE id = 2")
    db.execute("DELETE FROM audit_events WHERE id = 3")
    db.commit()
    db.close()
    assert verify_chain(cat).first_broken_id == 4


def test_deleting_the_newest_audit_rows_is_found(cat, capsys):
    """The chain's head is anchored outside the table: deleting the newest rows leaves a chain that still links,
    and verify still says it is broken, from the shell with a non-zero exit (issue 14, item 17)."""
    from app.cli import main as cli

    with acting_as("ana"), cat.unit_of_work() as s:
        for k in range(3):
            ops.create_individual(s, f"Animal {k}", user="ana")
            s.commit()
    assert verify_chain(cat).ok and verify_chain(cat).rows == 6
    db = sqlite3.connect(cat.data_dir / "catalogue.db")
    db.execute("DELETE FROM audit_events WHERE id = (SELECT max(id) FROM audit_events)")
    db.commit()
    check = verify_chain(cat)
    assert not check.ok and check.head_missing and check.first_broken_id == 6 and check.rows == 5
    assert cli(["--data-dir", str(cat.data_dir), "audit", "verify"]) == 3
    assert "the newest changes were deleted" in capsys.readouterr().out
    db.execute("DELETE FROM audit_events WHERE id >= 4")  # a longer tail: the same
    db.commit()
    db.close()
    assert verify_chain(cat).head_missing
    # a rolled-back change never moves the anchor; a new committed one does (the chain grows from row 3 again,
    # so the check still fails: the anchor keeps the highest row ever written)
    with acting_as("ana"), cat.unit_of_work() as s:
        ops.create_individual(s, "Ghost", user="ana")
        s.flush()
    assert verify_chain(cat).first_broken_id == 6


def test_a_restored_backup_anchors_its_own_head(cat, tmp_path):
    from db.audit import read_head
    from db.backup import backup, restore

    with acting_as("ana"), cat.unit_of_work() as s:
        ops.create_individual(s, "Before", user="ana")
        s.commit()
    backup(cat, tmp_path / "bk")
    with acting_as("ana"), cat.unit_of_work() as s:
        ops.create_individual(s, "After", user="ana")
        s.commit()
    restore(tmp_path / "bk", cat.data_dir, force=True)
    from db.session import open_catalogue

    restored = open_catalogue(cat.data_dir)
    assert verify_chain(restored).ok and read_head(cat.data_dir)["id"] == verify_chain(restored).rows == 2


def test_the_audit_csv_defuses_spreadsheet_formulas(cat):
    with acting_as("=HYPERLINK(\"x\")"), cat.unit_of_work() as s:
        ops.create_individual(s, "@SUM(A1)", user="x")
        s.commit()
    text = audit_csv(audit_rows(cat))
    import csv

    rows = list(csv.DictReader(io.StringIO(text)))
    added = next(r for r in rows if r["action"] == "individual.add")
    assert added["user"] == "'=HYPERLINK(\"x\")" and "@SUM(A1)" in added["details"]
    assert not any(cell.startswith(("=", "@", "+", "-")) for r in rows for cell in r.values())


def test_cli_users_and_audit(data_dir, monkeypatch, capsys, tmp_path):
    from app.cli import main

    base = ["--data-dir", str(data_dir)]
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    monkeypatch.delenv("ROSETTE_ADMIN_PASSWORD", raising=False)
    assert main([*base, "--user", "ops", "users", "add", "cora", "--role", "curator", "--password-stdin"]) == 0
    assert "first admin account created: user 'admin'" in capsys.readouterr().out  # never a catalogue without one
    assert main([*base, "users", "role", "cora", "superuser"]) == 1
    assert "unknown role 'superuser'" in capsys.readouterr().err
    assert main([*base, "--user", "ops", "users", "role", "cora", "admin"]) == 0
    assert main([*base, "users", "list"]) == 0
    listing = capsys.readouterr().out
    assert "cora" in listing and "admin" in listing
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main([*base, "users", "passwd", "cora"]) == 1  # no terminal and no --password-stdin
    assert "--password-stdin" in capsys.readouterr().err
    assert main([*base, "audit", "--user", "ops"]) == 0
    out = capsys.readouterr().out
    assert "user.add" in out and "user.role" in out
    assert main([*base, "audit", "--csv", str(tmp_path / "trail.csv")]) == 0
    assert "user.role" in (tmp_path / "trail.csv").read_text()
    assert main([*base, "audit", "verify"]) == 0
    assert "intact" in capsys.readouterr().out
    assert main([*base, "users", "disable", "admin"]) == 0  # cora is an admin too
    capsys.readouterr()
    assert main([*base, "users", "disable", "cora"]) == 1  # now the only admin who can sign in
    assert "last admin" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.StringIO(PASSWORD + "\n"))
    assert main([*base, "users", "add", "ben", "--password-stdin"]) == 0
    assert main([*base, "users", "disable", "ben"]) == 0 and "can no longer sign in" in capsys.readouterr().out
    check = open_catalogue(data_dir)
    assert role_of(check, "ben") is None  # disabled: no role, so every handler refuses ben
    check.close()
    assert main([*base, "users", "enable", "ben"]) == 0 and "can sign in again" in capsys.readouterr().out


def test_names_with_terminal_escapes_are_printed_escaped(data_dir, capsys):
    from app.cli import main

    cat = open_catalogue(data_dir)
    with acting_as("ops"), cat.unit_of_work() as s:
        ops.create_individual(s, "Amber", user="ops\x1b]0;pwned\x07")  # a history name, stored as given
        s.commit()
    cat.close()
    assert main(["--data-dir", str(data_dir), "users", "list"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "ops\\x1b]0;pwned\\x07" in out


def test_changes_a_job_makes_are_audited_under_who_queued_it(cat):
    from jobs import queue

    with cat.unit_of_work() as s:
        _photo(s, 1)
        s.commit()

    @queue.register_job_kind("flank_left_for_test")
    def _flank_left(c, params, ctx):
        with c.unit_of_work() as s:
            s.get(Image, 1).flank = "left"
            s.commit()
        return {"summary": "flanked"}

    try:
        with acting_as("cora"):
            job_id = queue.submit(cat, "flank_left_for_test", {})
        assert queue.run_job(cat, job_id).value == "succeeded"  # run later, outside cora's call
    finally:
        queue._HANDLERS.pop("flank_left_for_test", None)
        queue._KIND_QUEUE.pop("flank_left_for_test", None)
    (row,) = audit_rows(cat, action="photo.flank")
    assert row.user == "cora" and audit_rows(cat, action="job.submit")[0].user == "cora"


def test_password_guessing_is_throttled_per_name(people):
    from db.users import LoginThrottle, sign_in

    now = [1000.0]
    throttle = LoginThrottle(max_failures=3, window_s=60, lock_s=30, clock=lambda: now[0])
    for _ in range(3):
        assert not sign_in(people, "cora", "wrong-guess", throttle=throttle)
    assert not sign_in(people, "cora", PASSWORD, throttle=throttle)  # locked: even the right password
    assert sign_in(people, "vera", PASSWORD, throttle=throttle)  # other names are not affected
    now[0] += 31
    assert sign_in(people, "cora", PASSWORD, throttle=throttle)  # the lock has passed
    # failures spread wider than the window never lock
    for _ in range(5):
        now[0] += 61
        assert not sign_in(people, "vera", "wrong-guess", throttle=throttle)
    assert sign_in(people, "vera", PASSWORD, throttle=throttle)


def test_launch_options_have_a_door_only_when_signing_in(cat):
    from app.ui import launch_options

    assert "auth" in launch_options(cat) and callable(launch_options(cat)["auth"])
    assert "auth" not in launch_options(cat, sign_in=False)


def test_single_user_mode_is_refused_off_loopback(data_dir, capsys):
    from app.cli import main

    assert main(["--data-dir", str(data_dir), "serve", "--host", "0.0.0.0", "--single-user", "--no-demo"]) == 1
    assert "only on this machine" in capsys.readouterr().err


def test_audit_details_read_as_fields():
    """The People tab shows an audit row's details as fields, not raw JSON (issue 14, item 12)."""
    from db.audit import readable_details

    assert readable_details({"name": {"old": "Amber", "new": "Amber II"}, "image_ids": [3, 4], "by": None}) == \
        "by: none; image ids: 3, 4; name: Amber -> Amber II"
    assert readable_details({"flank": {"old": "left", "new": "right"}, "source": {"kind": "manifest", "row": 2}}) == \
        "flank: left -> right; source: (kind manifest, row 2)"
    assert readable_details({}) == "" and readable_details([1, 2]) == "1, 2"
