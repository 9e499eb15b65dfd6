"""Migration 0010 (ids never reused) on the catalogue built at 0009 (tests/fixtures/catalogue_0009: the 0008 story,
then a deployment deleted, the newest box deleted and its id given by SQLite to a box drawn on another photo, a box
drawn and deleted, a species merged away), on SQLite and PostgreSQL: every row, column, foreign key, index and
unique constraint kept, the audit chain intact, and from then on no new annotation, deployment or species takes an
id that a deleted one had (not even one that only the audit trail and the box edits still name). Going back to 0009
gives the old tables back; a new catalogue has AUTOINCREMENT from the start."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, select, text

from app.cli import main as cli
from core.annotations import Box
from db.records.annotations import add_box, delete_box, list_annotations, undo_box_edit
from db.audit import acting_as, verify_chain
from db.models import BoxEdit, Deployment, Species
from db.session import head_revision, open_catalogue
from db.species import species_changes
from jobs.actions.species import set_photo_species, undo_species_change
from jobs.requests.catalogue import PhotoSpeciesRequest, UndoRequest
from tests.old_catalogue import (
    OLD_CATALOGUES,
    audit_chain_holds,
    copy_old_catalogue,
    downgrade_to_revision,
    load_old_catalogue_into_postgres,
    pg_next_ids,
    revision_of,
    sqlite_url,
    table_counts,
    table_rows,
)

OLD = OLD_CATALOGUES["0009"]
REBUILT = ("images", "deployments", "species", "benchmarks")
#: The largest id each of them ever handed out in the fixture; rows deleted since held those of images (17: drawn
#: on frame_3 and deleted), deployments (2: CT-02) and species (2: Ocelot, merged away).
LARGEST_EVER = {"images": 17, "deployments": 2, "species": 2, "benchmarks": 1}
FRAME_2, FRAME_3 = 14, 15  # photos
REUSED = 16  # frame_2's drawn box, deleted; SQLite gave its id to the box drawn on frame_3 next
#: Columns later migrations add (empty after the upgrade): 0011, the species' common name.
LATER_COLUMNS = {"species": {"common_name"}}
LATER_TABLES = {"flank_link_decisions"}  # tables later migrations add (0012)


def _without_later_columns(table: str, rows: list[dict]) -> list[dict]:
    later = LATER_COLUMNS.get(table, set())
    assert all(row[c] is None for row in rows for c in later), table
    return [{k: v for k, v in row.items() if k not in later} for row in rows]


def _engine_rows(url: str) -> dict[str, list[dict]]:
    engine = create_engine(url)
    try:
        return {t: table_rows(engine, t) for t in OLD.counts if t != "alembic_version"}
    finally:
        engine.dispose()


def _schema(url: str) -> dict[str, dict]:
    """Per table: its columns (type, nullability, default), primary key columns, foreign keys, indexes and unique
    constraints, as the database reports them. (The primary key's name is left out: SQLite writes AUTOINCREMENT on
    the column, where a constraint name has no place.)"""
    engine = create_engine(url)
    try:
        insp = inspect(engine)
        out = {}
        for t in sorted(set(insp.get_table_names()) - {"alembic_version", "sqlite_sequence"}):
            out[t] = {
                "columns": [(c["name"], str(c["type"]), c["nullable"], c.get("default")) for c in insp.get_columns(t)],
                "pk": insp.get_pk_constraint(t)["constrained_columns"],
                "fks": sorted((f["name"] or "", tuple(f["constrained_columns"]), f["referred_table"],
                               tuple(f["referred_columns"]), tuple(sorted(f.get("options", {}).items())))
                              for f in insp.get_foreign_keys(t)),
                "indexes": sorted((i["name"], tuple(i["column_names"]), bool(i["unique"]))
                                  for i in insp.get_indexes(t)),
                "uniques": sorted((u["name"] or "", tuple(u["column_names"])) for u in insp.get_unique_constraints(t)),
            }
        return out
    finally:
        engine.dispose()


def _sqlite_tables(url: str) -> dict[str, str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return dict(conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'table'")).all())
    finally:
        engine.dispose()


def _sqlite_sequence(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            if "sqlite_sequence" not in _names(conn):
                return {}
            return dict(conn.execute(text("SELECT name, seq FROM sqlite_sequence")).all())
    finally:
        engine.dispose()


def _names(conn) -> set[str]:
    return set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars())


def _check_upgraded(url: str, before: dict[str, list[dict]], schema: dict[str, dict]) -> None:
    assert before["images"] and before["box_edits"]  # the fixture's rows, not an empty database
    engine = create_engine(url)
    try:
        assert revision_of(engine) == head_revision()
        counts = table_counts(engine)
        for table, n in OLD.counts.items():
            if table != "audit_events":
                assert counts[table] == n, table
        after = {t: _without_later_columns(t, table_rows(engine, t)) for t in before}
        for table, rows in before.items():  # every row, its id and every value: decisions, box edits, ...
            assert after[table][:len(rows)] == rows, table
            if table != "audit_events":
                assert len(after[table]) == len(rows), table
        assert audit_chain_holds(engine) == (len(after["audit_events"]), None)
        if engine.dialect.name == "sqlite":
            with engine.connect() as conn:
                assert conn.exec_driver_sql("PRAGMA foreign_key_check").all() == []
                assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    finally:
        engine.dispose()
    upgraded = _schema(url)
    for table, later in LATER_COLUMNS.items():
        upgraded[table]["columns"] = [c for c in upgraded[table]["columns"] if c[0] not in later]
    upgraded = {t: v for t, v in upgraded.items() if t not in LATER_TABLES}
    assert upgraded == schema  # no column, foreign key, index or unique constraint lost or changed


def _use_after_upgrade(cat, data_dir, url_args: list[str]) -> None:
    """What the upgrade must make true: an undone delete comes back under its own id, or (its id given away before
    the upgrade) under one never used; no new row takes an id a deleted one had."""
    next_image = LARGEST_EVER["images"] + 1
    # frame_2's newest edit is the delete of box 16, whose id the box on frame_3 holds (given before the upgrade)
    undone = undo_box_edit(cat, FRAME_2, user="ana")
    assert (undone.kind, undone.annotation_id) == ("delete", next_image)
    assert {r.id: r.source for r in list_annotations(cat, photo_id=FRAME_2)} == \
        {15: "megadetector", next_image: "drawn"}
    assert {r.id: r.source for r in list_annotations(cat, photo_id=FRAME_3)} == {REUSED: "drawn"}
    with cat.unit_of_work() as s:
        edits = {p: [(e.kind, e.annotation_id) for e in s.scalars(select(BoxEdit).where(BoxEdit.photo_id == p)
                                                                  .order_by(BoxEdit.id))] for p in (FRAME_2, FRAME_3)}
    assert edits == {FRAME_2: [("add", next_image), ("delete", next_image)],
                     FRAME_3: [("add", REUSED), ("add", 17), ("delete", 17)]}

    # a new species does not take Ocelot's id, so undoing Ocelot's merge brings it back under its own
    merge = species_changes(cat)[0]
    assert merge.kind.value == "species_merge" and merge.payload["source"]["id"] == 2
    new_species = set_photo_species(cat, PhotoSpeciesRequest((15,), "Jaguar", user="admin"))
    assert new_species == LARGEST_EVER["species"] + 1
    undo_species_change(cat, UndoRequest(user="admin", event_id=merge.id))
    with cat.unit_of_work() as s:
        assert {sp.id: sp.name for sp in s.scalars(select(Species))} == {1: "default", 2: "Ocelot", 3: "Jaguar"}

    # a box drawn after deleting the newest one does not take its id
    delete_box(cat, next_image, user="ben")
    assert add_box(cat, FRAME_2, Box(0.1, 0.1, 0.3, 0.3), user="ben") == next_image + 1

    # a deployment: not CT-02's id
    with acting_as("ana"), cat.unit_of_work() as s:
        dep = Deployment(key="CT-03", start="2024-07-01T00:00:00-04:00", end="2024-07-31T00:00:00-04:00")
        s.add(dep)
        s.commit()
        assert dep.id == LARGEST_EVER["deployments"] + 1

    check = verify_chain(cat)
    assert check.ok, check
    assert cli(["--data-dir", str(data_dir), *url_args, "audit", "verify"]) == 0


def test_sqlite_catalogue_at_0009_upgrades_with_nothing_lost_and_ids_never_reused(tmp_path, capsys):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")
    url = sqlite_url(data_dir / "catalogue.db")
    before, schema = _engine_rows(url), _schema(url)
    old_sql = _sqlite_tables(url)
    assert "AUTOINCREMENT" not in "".join(old_sql.values()) and _sqlite_sequence(url) == {}
    cat = open_catalogue(data_dir)  # opening migrates
    _check_upgraded(url, before, schema)
    new_sql = _sqlite_tables(url)
    assert {t for t, sql in new_sql.items() if "AUTOINCREMENT" in (sql or "")} == set(REBUILT)
    assert {t: sql for t, sql in new_sql.items() if t not in {*REBUILT, *LATER_TABLES, "sqlite_sequence"}} == \
        {t: sql for t, sql in old_sql.items() if t not in REBUILT}  # the other tables untouched
    assert _sqlite_sequence(url) == LARGEST_EVER
    _use_after_upgrade(cat, data_dir, [])
    assert "audit trail intact" in capsys.readouterr().out
    cat.close()


@pytest.mark.postgres
def test_postgres_catalogue_at_0009_upgrades_with_nothing_lost_and_ids_never_reused(pg_db_url, tmp_path, capsys):
    load_old_catalogue_into_postgres(OLD.db, pg_db_url, revision="0009")
    before, schema = _engine_rows(pg_db_url), _schema(pg_db_url)
    engine = create_engine(pg_db_url)
    try:  # the copy's sequences restart after the largest id copied: deleted rows' ids would come again
        assert {t: n for t, n in pg_next_ids(engine).items() if t in REBUILT} == \
            {"images": 17, "deployments": 2, "species": 2, "benchmarks": 2}
    finally:
        engine.dispose()
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")  # the photo files, the audit head
    cat = open_catalogue(data_dir, url=pg_db_url)
    _check_upgraded(pg_db_url, before, schema)
    engine = create_engine(pg_db_url)
    try:
        assert {t: n for t, n in pg_next_ids(engine).items() if t in REBUILT} == \
            {t: n + 1 for t, n in LARGEST_EVER.items()}
    finally:
        engine.dispose()
    _use_after_upgrade(cat, data_dir, ["--database-url", pg_db_url])
    assert "audit trail intact" in capsys.readouterr().out
    cat.close()
    counts = _engine_counts(pg_db_url)
    downgrade_to_revision(pg_db_url, "0009")  # nothing to undo on PostgreSQL: the rows stay
    assert _engine_counts(pg_db_url) == counts and _revision(pg_db_url) == "0009"


def test_going_back_to_0009_gives_the_old_tables_back_and_up_again_keeps_the_largest_ids(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0009")
    url = sqlite_url(data_dir / "catalogue.db")
    before, schema = _engine_rows(url), _schema(url)
    open_catalogue(data_dir).close()
    downgrade_to_revision(url, "0009")
    assert _revision(url) == "0009"
    assert "AUTOINCREMENT" not in "".join(sql or "" for sql in _sqlite_tables(url).values())
    assert _sqlite_sequence(url) == {}
    assert _schema(url) == schema
    after = _engine_rows(url)
    assert {t: r for t, r in after.items() if t != "audit_events"} == \
        {t: r for t, r in before.items() if t != "audit_events"}
    assert after["audit_events"][:len(before["audit_events"])] == before["audit_events"]
    open_catalogue(data_dir).close()  # up again: the largest ids come from the trail and the box edits again
    assert _revision(url) == head_revision() and _sqlite_sequence(url) == LARGEST_EVER


def test_a_new_catalogue_has_autoincrement_and_never_gives_a_deleted_id_again(tmp_path):
    cat = open_catalogue(tmp_path / "data")
    url = sqlite_url(tmp_path / "data" / "catalogue.db")
    tables = _sqlite_tables(url)
    assert {t for t, sql in tables.items() if "AUTOINCREMENT" in (sql or "")} == set(REBUILT)
    for table in REBUILT:
        assert "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT" in tables[table], tables[table]
    assert _sqlite_sequence(url) == {"images": 0, "deployments": 0, "species": 1, "benchmarks": 0}
    ids = []
    with acting_as("ana"):
        for key in ("A", "B"):
            with cat.unit_of_work() as s:
                dep = Deployment(key=key, start="2024-07-01T00:00:00-04:00", end="2024-07-31T00:00:00-04:00")
                s.add(dep)
                s.commit()
                ids.append(dep.id)
                s.delete(dep)
                s.commit()
    assert ids == [1, 2]
    cat.close()


def _engine_counts(url: str) -> dict[str, int]:
    engine = create_engine(url)
    try:
        return {t: n for t, n in table_counts(engine).items() if t not in LATER_TABLES}
    finally:
        engine.dispose()


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        return revision_of(engine)
    finally:
        engine.dispose()
