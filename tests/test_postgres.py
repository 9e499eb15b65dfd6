"""PostgreSQL as a first-class catalogue (issue 17, item 1), against a real server: a throwaway cluster started once
per test session (tests/pg_cluster.py; Debian's ``postgresql``), one fresh database per test.

The catalogue, decision-race and audit scenarios of tests/test_catalogue.py, tests/test_decisions_race.py and
tests/test_accounts.py run here unchanged on a PostgreSQL catalogue; then what only PostgreSQL needs: the schema
(jsonb, the id sequences), two writers on one audit chain, ``rosette catalogue copy`` both ways, and the messages
for a server that is down or refuses the password."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import func, inspect, select, text

from app.cli import main as cli
from db import catalogue as ops
from db.audit import acting_as, verify_chain
from db.catalogue_copy import copy_catalogue, copy_order
from db.models import AuditEvent, Deployment, Image, Individual, MatchDecision, Model, Photo, Sighting, Species
from db.session import alembic_config, open_catalogue
from tests import test_accounts, test_catalogue, test_decisions_race
from tests.pg_cluster import conninfo

pytestmark = pytest.mark.postgres


@pytest.fixture()
def pg_cat(data_dir, pg_db_url):
    """An empty catalogue on PostgreSQL (its own database), migrated to head."""
    c = open_catalogue(data_dir, url=pg_db_url)
    yield c
    c.close()


@pytest.fixture()
def pg_race_cat(pg_cat):
    """tests/test_decisions_race.py's catalogue (Amber with photos 2 and 3; photo 1 unassigned), on PostgreSQL."""
    with pg_cat.unit_of_work() as s:
        ind = ops.create_individual(s, "Amber", user="ana")
        for i in range(3):
            s.add(Image(content_hash=f"h{i}", original_name=f"p{i}.jpg", blob_path=f"images/h{i}.jpg", format="JPEG",
                        mode="RGB", width=4, height=4, size_bytes=1, individual_id=ind.id if i else None))
        s.commit()
    return pg_cat


# --------------------------------------------------------------------------- the schema


def test_a_catalogue_opens_on_postgres_at_head_with_jsonb_columns(pg_cat, data_dir):
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    with pg_cat.engine.connect() as conn:
        assert conn.dialect.name == "postgresql"
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == head
    insp = inspect(pg_cat.engine)
    types = {(t, c["name"]): type(c["type"]).__name__ for t in insp.get_table_names() for c in insp.get_columns(t)}
    assert types[("audit_events", "details")] == "JSONB"
    assert types[("images", "mask_details")] == "JSONB" and types[("jobs", "params")] == "JSONB"
    assert types[("users", "active")] == "BOOLEAN"
    # reopening (a second server starting) migrates nothing and fails nothing
    again = open_catalogue(data_dir, url=pg_cat.url)
    again.close()
    with pg_cat.unit_of_work() as s:  # the default species was inserted with id 1: the sequence is past it
        s.add(Species(name="kudu"))
        s.commit()
        assert s.scalars(select(Species.id).order_by(Species.id)).all() == [1, 2]


def test_servers_on_different_machines_migrating_one_new_database_at_once_all_start(tmp_path, pg_db_url):
    """Three servers (each its own data folder, so the folder's file lock does not serialise them) open one new
    PostgreSQL database at once: the advisory lock makes them migrate one after the other, and none fails."""
    barrier = threading.Barrier(3)
    outcomes: list[str] = []

    def start(k: int) -> None:
        barrier.wait()
        try:
            open_catalogue(tmp_path / f"server{k}", url=pg_db_url).close()
            outcomes.append("ok")
        except Exception as exc:  # noqa: BLE001 - reported below
            outcomes.append(repr(exc))

    threads = [threading.Thread(target=start, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert outcomes == ["ok"] * 3


def test_json_round_trips_as_values_on_postgres(pg_cat):
    with pg_cat.unit_of_work() as s:
        s.add(Image(content_hash="j", original_name="j.jpg", blob_path="images/j.jpg", format="JPEG", mode="RGB",
                    width=4, height=4, size_bytes=1, mask_details={"b": 1.5, "a": [1, "two", None]},
                    mask_flags=["small"]))
        s.commit()
    with pg_cat.unit_of_work() as s:
        img = s.scalar(select(Image))
        assert img.mask_details == {"a": [1, "two", None], "b": 1.5} and img.mask_flags == ["small"]
        # jsonb: the document can be queried inside
        assert s.scalar(select(Image.id).where(Image.mask_details["b"].as_float() == 1.5)) == img.id


# --------------------------------------------------------------------------- the SQLite scenarios, on PostgreSQL

CATALOGUE_SCENARIOS = [
    (test_catalogue, "test_migrations_match_models"),  # the migrations make exactly the models' schema here too
    (test_catalogue, "test_unit_of_work_rolls_back_unless_committed"),
    (test_catalogue, "test_create_rename_and_undo"),
    (test_catalogue, "test_duplicate_and_empty_names_are_refused"),
    (test_catalogue, "test_assign_unassign_and_undo"),
    (test_catalogue, "test_merge_moves_images_and_undo_restores_exact_assignment"),
    (test_catalogue, "test_merge_refuses_self_and_inactive"),
    (test_catalogue, "test_undo_merge_refused_after_images_moved"),
    (test_catalogue, "test_split_and_undo"),
    (test_catalogue, "test_history_and_last_undoable"),
    (test_catalogue, "test_list_individuals_counts_and_stats"),
    (test_accounts, "test_each_kind_of_change_is_audited_with_who_and_what"),
    (test_accounts, "test_a_change_rolled_back_leaves_no_audit_row"),
]


@pytest.mark.parametrize(("module", "name"), CATALOGUE_SCENARIOS, ids=[n for _, n in CATALOGUE_SCENARIOS])
def test_catalogue_scenarios_on_postgres(pg_cat, module, name):
    getattr(module, name)(pg_cat)


RACE_SCENARIOS = [
    ("test_a_decision_on_a_stale_screen_is_refused_and_undo_moves_the_version", ()),
    ("test_simultaneous_decisions_exactly_one_wins", ("new",)),
    ("test_simultaneous_decisions_exactly_one_wins", ("same",)),
    ("test_simultaneous_undo_undoes_the_change_once", ()),
    ("test_undo_refuses_when_a_newer_change_came_since_the_page_was_shown", ()),
    ("test_undo_last_change_after_a_new_individual_decision_undoes_the_decision", ()),
]


@pytest.mark.parametrize(("name", "args"), RACE_SCENARIOS, ids=[f"{n}{list(a) or ''}" for n, a in RACE_SCENARIOS])
def test_decision_races_on_postgres(pg_race_cat, name, args):
    """Eight curators deciding one photo at once: the conditional UPDATE gives exactly one winner (PostgreSQL
    re-checks its WHERE on the row the first committed), the others are told, the audit chain stays whole."""
    getattr(test_decisions_race, name)(pg_race_cat, *args)


def test_the_loser_of_a_decision_race_on_postgres_is_told_who_won(pg_race_cat):
    """The same race, checked here in full: one decision row, one new individual, version moved by one."""
    seen = test_decisions_race.current_decision_version(pg_race_cat, 1)

    def curator(k: int) -> str:
        test_decisions_race.record_decision(pg_race_cat, query_image_id=1, decision="new", user=f"c{k}",
                                            seen_version=seen)
        return "won"

    outcomes = test_decisions_race.at_once(6, curator)
    assert outcomes.count("won") == 1
    assert all(o.startswith("told: this photo was decided by c") for o in outcomes if o != "won")
    with pg_race_cat.unit_of_work() as s:
        assert s.query(MatchDecision).count() == 1 and s.query(Individual).count() == 2
        assert s.get(Image, 1).decision_version == seen + 1


# --------------------------------------------------------------------------- the audit chain, two writers


def test_two_servers_writing_at_once_keep_one_unbroken_audit_chain(data_dir, pg_db_url):
    """Two catalogues open on one database (two servers: separate connection pools), four threads each creating
    individuals as fast as they can: every audit row links to the one before (no fork), verify says ok."""
    servers = [open_catalogue(data_dir, url=pg_db_url) for _ in range(2)]
    per_thread, threads_per_server = 6, 2
    barrier = threading.Barrier(len(servers) * threads_per_server)
    errors: list[BaseException] = []

    def write(cat, k: int) -> None:
        barrier.wait()
        try:
            for j in range(per_thread):
                with acting_as(f"writer{k}"), cat.unit_of_work() as s:
                    ops.create_individual(s, f"Animal {k}-{j}", user=f"writer{k}")
                    s.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(servers[k % 2], k))
               for k in range(len(servers) * threads_per_server)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    check = verify_chain(servers[0])
    n = len(threads) * per_thread * 2  # individual.add + history.create per individual
    assert check.ok and check.rows == n
    with servers[1].unit_of_work() as s:
        rows = s.execute(select(AuditEvent.prev_hash, AuditEvent.row_hash).order_by(AuditEvent.id)).all()
    assert len({r.prev_hash for r in rows}) == n  # no two rows hang off the same link
    assert all(rows[i].prev_hash == rows[i - 1].row_hash for i in range(1, n))
    with servers[0].unit_of_work() as s:
        assert set(s.scalars(select(AuditEvent.user).distinct())) == {f"writer{k}" for k in range(len(threads))}
    for c in servers:
        c.close()


# --------------------------------------------------------------------------- rosette catalogue copy


def _seed(cat) -> None:
    """A little of everything, with the awkward references: a species whose active model comes later in the copy
    order, an individual merged into a later one, decisions, audit rows, JSON documents, SQL NULLs."""
    with acting_as("ana"), cat.unit_of_work() as s:
        a = ops.create_individual(s, "Amber", user="ana")
        b = ops.create_individual(s, "Bruno", user="ana")
        c = ops.create_individual(s, "Cleo", user="ana")
        for k in range(6):
            s.add(Image(content_hash=f"c{k}", original_name=f"p{k}.jpg", blob_path=f"images/c{k}.jpg",
                        format="JPEG", mode="RGB", width=4, height=4, size_bytes=1,
                        individual_id=[a.id, a.id, b.id, c.id, None, None][k],
                        mask_details={"k": k, "why": "test"} if k % 2 else None))
        s.flush()
        ops.merge_individuals(s, a.id, c.id, user="ana")  # merged_into_id points to a later row of the same table
        model = Model(name="m1", backbone="efficientnet_lite0", config={"dim": 8}, species_id=1)
        s.add(model)
        s.flush()
        s.get(Species, 1).active_model_id = model.id  # species -> models: a reference copied after the species
        s.commit()
    test_decisions_race.record_decision(cat, query_image_id=5, decision="new", user="ana", new_name="Dora")
    test_decisions_race.record_decision(cat, query_image_id=6, decision="same", user="ana", candidate_image_id=3)


def _dump(cat) -> dict[str, list[tuple]]:
    """Every row of every catalogue table, in primary-key order, as plain values."""
    out = {}
    with cat.engine.connect() as conn:
        for t in copy_order():
            rows = conn.execute(select(t).order_by(*t.primary_key.columns)).all()
            out[t.name] = [tuple(r) for r in rows]
    return out


def test_copy_sqlite_to_postgres_and_back_keeps_every_row_and_id(data_dir, pg_db_url, tmp_path, capsys):
    d = str(data_dir)
    sqlite_cat = open_catalogue(data_dir)
    _seed(sqlite_cat)
    before = _dump(sqlite_cat)
    assert cli(["--data-dir", d, "catalogue", "copy", "--to", pg_db_url]) == 0
    out = capsys.readouterr().out
    password = conninfo(pg_db_url).split(":")[2].split("@")[0]
    assert password not in out and "rosette:***@" in out
    assert "images" in out and "audit chain on the target: ok" in out and "stay in the content-addressed store" in out
    assert "DIFFERENT" not in out

    pg = open_catalogue(data_dir, url=pg_db_url)
    assert _dump(pg) == before  # every row, every id, every value (JSON, NULLs, enums, times)
    assert verify_chain(pg).ok
    with pg.unit_of_work() as s:  # the id sequences continue after the copied ids
        new = ops.create_individual(s, "Eve", user="ana")
        s.commit()
        assert new.id == max(r[0] for r in before["individuals"]) + 1

    back = tmp_path / "back" / "catalogue.db"
    back.parent.mkdir()
    assert cli(["--data-dir", d, "--database-url", pg_db_url, "catalogue", "copy", "--to", f"sqlite:///{back}"]) == 0
    out = capsys.readouterr().out
    assert "audit chain on the target: ok" in out
    returned = open_catalogue(data_dir, url=f"sqlite:///{back}")
    after = _dump(returned)
    assert after["individuals"][:len(before["individuals"])] == before["individuals"]
    assert {k: len(v) for k, v in after.items()} == {k: len(v) + (2 if k == "audit_events" else 1 if k in (
        "individuals", "identity_events") else 0) for k, v in before.items()}  # + Eve, her history and audit rows
    assert verify_chain(returned).ok
    for c in (sqlite_cat, pg, returned):
        c.close()


def test_copy_into_a_catalogue_that_is_not_empty_is_refused_unless_forced(data_dir, pg_db_url, capsys):
    d = str(data_dir)
    cat = open_catalogue(data_dir)
    _seed(cat)
    assert cli(["--data-dir", d, "catalogue", "copy", "--to", pg_db_url]) == 0
    capsys.readouterr()
    with cat.unit_of_work() as s:
        ops.create_individual(s, "Late", user="ana")
        s.commit()
    assert cli(["--data-dir", d, "catalogue", "copy", "--to", pg_db_url]) == 1
    err = capsys.readouterr().err
    assert re.search(r"is not empty: table (?!species)\w+ holds [\d,]+ rows?;", err) and "--force" in err
    assert "Traceback" not in err
    pg = open_catalogue(data_dir, url=pg_db_url)
    with pg.unit_of_work() as s:  # nothing was changed by the refused copy
        assert s.scalar(select(Individual.id).where(Individual.name == "Late")) is None
    assert cli(["--data-dir", d, "catalogue", "copy", "--to", pg_db_url, "--force"]) == 0
    with pg.unit_of_work() as s:
        assert s.scalar(select(Individual.id).where(Individual.name == "Late")) is not None
    assert _dump(pg) == _dump(cat) and verify_chain(pg).ok
    # the catalogue itself as its own target is refused
    assert cli(["--data-dir", d, "catalogue", "copy", "--to", f"sqlite:///{Path(d) / 'catalogue.db'}"]) == 1
    assert "is the catalogue being copied" in capsys.readouterr().err
    pg.close()
    cat.close()


# --------------------------------------------------------------------------- a server down or refusing


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_a_wrong_password_a_missing_database_and_a_server_down_are_one_line_without_the_password(
        data_dir, pg_url, capsys):
    d = str(data_dir)
    port = conninfo(pg_url).rsplit(":", 1)[1].split("/")[0]
    wrong = f"postgresql+psycopg://rosette:not-the-secret-pw@127.0.0.1:{port}/rosette"
    assert cli(["--data-dir", d, "--database-url", wrong, "stats"]) == 1
    line = _one_error_line(capsys)
    assert line == (f"error: cannot open the catalogue database postgresql+psycopg://rosette:***@127.0.0.1:{port}"
                    '/rosette: password authentication failed for user "rosette"')
    assert "not-the-secret-pw" not in line

    good_password = conninfo(pg_url).split(":")[2].split("@")[0]
    missing = f"postgresql+psycopg://rosette:{good_password}@127.0.0.1:{port}/nope"
    assert cli(["--data-dir", d, "--database-url", missing, "stats"]) == 1
    line = _one_error_line(capsys)
    assert line.endswith('/nope: database "nope" does not exist') and good_password not in line

    down = "postgresql+psycopg://u:secret@127.0.0.1:1/x"
    assert cli(["--data-dir", d, "--database-url", down, "stats"]) == 1
    line = _one_error_line(capsys)
    assert line == ("error: cannot open the catalogue database postgresql+psycopg://u:***@127.0.0.1:1/x: "
                    "the server is not running, or not accepting connections at that address")
    # the web app says the same before it starts anything
    assert cli(["--data-dir", d, "--database-url", down, "serve", "--no-worker", "--no-demo"]) == 1
    assert _one_error_line(capsys) == line
    # and so does the copy, for a target that is down
    assert cli(["--data-dir", d, "catalogue", "copy", "--to", down]) == 1
    assert _one_error_line(capsys) == line


@pytest.mark.slow  # four CLI processes, twice: ~10 s
def test_cli_decisions_at_once_on_postgres_exactly_one_wins(pg_race_cat, monkeypatch):
    """Four ``rosette decide`` processes at once against the PostgreSQL catalogue (``$ROSETTE_DATABASE_URL``,
    inherited by the processes): tests/test_decisions_race.py's scenario, one winner each round."""
    monkeypatch.setenv("ROSETTE_DATABASE_URL", pg_race_cat.url)
    test_decisions_race.test_cli_decisions_at_once_exactly_one_wins(pg_race_cat)


def test_the_copy_goes_in_batches_and_names_what_it_copied(data_dir, pg_db_url):
    """With batches of 2 rows, the 6 photos go over in three inserts (never a whole table at once), and the
    report's per-table counts are those of the source."""
    cat = open_catalogue(data_dir)
    _seed(cat)
    seen: list[tuple[str, int]] = []
    report = copy_catalogue(cat, pg_db_url, batch_rows=2, progress=lambda table, n: seen.append((table, n)))
    assert [n for table, n in seen if table == "images"] == [2, 4, 6]
    counts = {t.table: (t.source_rows, t.target_rows) for t in report.tables}
    assert counts["images"] == (6, 6) and counts["individuals"] == (4, 4) and counts["match_decisions"] == (2, 2)
    assert report.ok and report.audit.rows == counts["audit_events"][0] > 0
    assert "***" in report.target and conninfo(pg_db_url).split(":")[2].split("@")[0] not in report.target
    cat.close()


# --------------------------------------------------------------------------- a Camtrap DP import


def _camtrapdp_state(cat) -> dict[str, object]:
    """What a Camtrap DP import leaves: the rows by kind, and the package's keys and names as stored."""
    with cat.unit_of_work() as s:
        return {"photos": sorted(s.scalars(select(Photo.media_key))),
                "annotations": sorted(s.scalars(select(Image.observation_key)), key=str),
                "deployments": sorted(s.scalars(select(Deployment.key))),
                "individuals": sorted(s.scalars(select(Individual.name))),
                "species": sorted(s.scalars(select(Species.name))),
                "sightings": s.scalar(select(func.count(Sighting.id)))}


def test_a_camtrap_dp_import_on_postgres_is_the_import_on_sqlite(pg_cat, tmp_path):
    """The shared test package imported into PostgreSQL and into SQLite: the same report counts and the same rows;
    imported again on PostgreSQL, nothing is added."""
    from db.io.ingest import ingest_path
    from tests.test_camtrapdp_report import package

    path = package(tmp_path)
    on_sqlite = open_catalogue(tmp_path / "sqlite")
    expected = ingest_path(on_sqlite, path, user="ana")
    report = ingest_path(pg_cat, path, user="ana")
    assert report.counts == expected.counts and report.counts["imported"] == 4 and report.counts["error"] == 0
    assert report.about_counts == expected.about_counts
    state = _camtrapdp_state(pg_cat)
    assert state == _camtrapdp_state(on_sqlite) and len(state["annotations"]) == 5
    again = ingest_path(pg_cat, path, user="ana")
    assert again.counts["imported"] == again.counts["updated"] == again.counts["error"] == 0
    assert again.counts["duplicate"] == 4 and _camtrapdp_state(pg_cat) == state
    assert verify_chain(pg_cat).ok
    on_sqlite.close()
