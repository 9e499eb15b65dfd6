"""The catalogue made at schema revision 0007 (``tests/fixtures/catalogue_0007``, see ``tests/old_catalogue.py``) is
what the upgrade tests start from: it opens at 0007 with the rows it was built with, and loads into PostgreSQL at
0007 with every row unchanged. Nothing here upgrades it (the upgrade tests do)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import create_engine

from tests.old_catalogue import (
    FIXTURE_DB,
    FIXTURE_DIR,
    OLD_CATALOGUE_COUNTS,
    OLD_REVISION,
    audit_chain_holds,
    copy_old_catalogue,
    load_old_catalogue_into_postgres,
    max_ids,
    pg_next_ids,
    revision_of,
    sqlite_url,
    table_counts,
    table_rows,
)


@pytest.fixture()
def old_engine(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data")
    engine = create_engine(sqlite_url(data_dir / "catalogue.db"))
    yield data_dir, engine
    engine.dispose()


def test_the_fixture_is_small_and_one_file_of_database():
    files = [p for p in FIXTURE_DIR.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 1_000_000
    assert not [p.name for p in files if p.name.endswith(("-wal", "-shm", "-journal"))]


def test_the_old_catalogue_opens_at_0007_with_the_rows_it_was_built_with(old_engine):
    data_dir, engine = old_engine
    assert revision_of(engine) == OLD_REVISION
    assert table_counts(engine) == OLD_CATALOGUE_COUNTS

    decisions = table_rows(engine, "match_decisions")
    assert {d["decision"] for d in decisions} == {"same", "not", "unsure", "new"}
    assert sum(d["undone_at"] is not None for d in decisions) == 1
    assert {d["model_id"] for d in decisions} == {1}
    events = table_rows(engine, "identity_events")
    assert {"create", "assign", "rename", "merge", "split", "undo"} <= {e["kind"] for e in events}
    assert [e["kind"] for e in events if e["undone_at"] is not None] == ["assign", "merge"]  # a decision, a merge
    individuals = {i["name"]: i for i in table_rows(engine, "individuals")}
    assert set(individuals) == {"Amber", "Amber-2", "Bruno", "Cleópatra", "Dora", "Eve"}
    dora, cleo = individuals["Dora"], individuals["Cleópatra"]
    assert not dora["active"] and dora["merged_into_id"] == cleo["id"]
    assert individuals["Eve"]["active"] and individuals["Eve"]["merged_into_id"] is None  # its merge was undone
    (species,) = table_rows(engine, "species")
    (model,) = table_rows(engine, "models")
    assert species["active_model_id"] == model["id"] and model["status"] == "active"
    assert {j["kind"]: j["status"] for j in table_rows(engine, "jobs")} == {
        "embed": "queued", "evaluate": "succeeded", "mask": "cancelled"}
    (evaluation,) = table_rows(engine, "evaluations")
    assert evaluation["benchmark_id"] == 1 and evaluation["model_id"] == model["id"]
    assert "map_macro" in evaluation["metrics"]

    photos = table_rows(engine, "images")
    assert {p["mask_source"] for p in photos} == {None, "alpha", "grabcut"}
    assert [p["mode"] for p in photos if p["mask_source"] == "alpha"] == ["RGBA"]
    assert {p["flank_source"] for p in photos} == {None, "manifest", "curator"}
    assert len({p["sighting_id"] for p in photos}) == 3
    for p in photos:  # every file a row names is in the photo store
        for rel in (p["blob_path"], p["thumb_path"], p["mask_path"]):
            assert rel is None or (data_dir / rel).is_file(), rel
    assert {s["image_id"] for s in table_rows(engine, "match_suggestions")} == \
        {p["id"] for p in photos if p["individual_id"] is None}

    rows, broken = audit_chain_holds(engine)
    assert (rows, broken) == (OLD_CATALOGUE_COUNTS["audit_events"], None)
    head = json.loads((data_dir / "audit-head.json").read_text())
    last = table_rows(engine, "audit_events")[-1]
    assert (head["id"], head["row_hash"]) == (last["id"], last["row_hash"])


def test_copying_needs_an_empty_folder_and_leaves_the_fixture_alone(tmp_path):
    before = {p: p.stat().st_mtime_ns for p in FIXTURE_DIR.rglob("*")}
    data_dir = copy_old_catalogue(tmp_path / "a")
    (data_dir / "catalogue.db").write_bytes(b"changed")
    with pytest.raises(ValueError, match="not empty"):
        copy_old_catalogue(data_dir)
    assert {p: p.stat().st_mtime_ns for p in FIXTURE_DIR.rglob("*")} == before


@pytest.mark.postgres
def test_the_old_catalogue_loads_into_postgres_at_0007_with_every_row(pg_db_url):
    counts = load_old_catalogue_into_postgres(FIXTURE_DB, pg_db_url)
    assert counts == OLD_CATALOGUE_COUNTS
    source = create_engine(sqlite_url(FIXTURE_DB, read_only=True))
    target = create_engine(pg_db_url)
    try:
        assert target.dialect.name == "postgresql"
        assert revision_of(target) == OLD_REVISION
        assert table_counts(target) == OLD_CATALOGUE_COUNTS
        for table in OLD_CATALOGUE_COUNTS:  # the same values, ids and references included
            assert table_rows(target, table) == table_rows(source, table), table
        assert audit_chain_holds(target) == (OLD_CATALOGUE_COUNTS["audit_events"], None)
        assert pg_next_ids(target) == {name: n + 1 for name, n in max_ids(target).items()}
        with pytest.raises(ValueError, match="not empty"):
            load_old_catalogue_into_postgres(FIXTURE_DB, pg_db_url)
    finally:
        source.dispose()
        target.dispose()
