"""The catalogues made at schema revisions 0007 and 0008 (``tests/fixtures/catalogue_0007`` and ``catalogue_0008``,
see ``tests/old_catalogue.py``) are what the upgrade tests start from: each opens at its revision with the rows it
was built with, and loads into PostgreSQL at that revision with every row unchanged. Nothing here upgrades them
(the upgrade tests do)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import create_engine

from tests.old_catalogue import (
    FIXTURE_DB,
    FIXTURE_DIR,
    OLD_CATALOGUE_COUNTS,
    OLD_CATALOGUES,
    OLD_REVISION,
    audit_chain_holds,
    copy_old_catalogue,
    load_old_catalogue_into_postgres,
    max_ids,
    old_catalogue,
    pg_next_ids,
    revision_of,
    sqlite_url,
    table_counts,
    table_rows,
)

#: The most bytes each fixture may hold in the checkout.
MAX_BYTES = {"0007": 1_000_000, "0008": 600_000, "0009": 600_000}


@pytest.fixture()
def old_engine(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data")
    engine = create_engine(sqlite_url(data_dir / "catalogue.db"))
    yield data_dir, engine
    engine.dispose()


@pytest.mark.parametrize("revision", sorted(OLD_CATALOGUES))
def test_the_fixture_is_small_and_one_file_of_database(revision):
    fixture = OLD_CATALOGUES[revision]
    files = [p for p in fixture.dir.rglob("*") if p.is_file()]
    assert fixture.db in files and len(files) > 10
    assert sum(p.stat().st_size for p in files) < MAX_BYTES[revision]
    assert not [p.name for p in files if p.name.endswith(("-wal", "-shm", "-journal"))]
    assert not [p.name for p in fixture.dir.iterdir() if p.name in ("cache", "rosette.lock")]


def test_the_0007_names_are_the_0007_fixture_and_an_unknown_revision_is_refused(tmp_path):
    assert (OLD_CATALOGUES[OLD_REVISION].dir, OLD_CATALOGUES[OLD_REVISION].db) == (FIXTURE_DIR, FIXTURE_DB)
    assert OLD_CATALOGUES[OLD_REVISION].counts is OLD_CATALOGUE_COUNTS
    with pytest.raises(ValueError, match="no old catalogue at revision '0006'; there are 0007, 0008"):
        old_catalogue("0006")
    with pytest.raises(ValueError, match="no old catalogue at revision '0006'"):
        copy_old_catalogue(tmp_path / "a", revision="0006")
    assert not (tmp_path / "a").exists()


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


def test_the_old_catalogue_0008_opens_at_0008_with_the_rows_it_was_built_with(tmp_path):
    fixture = OLD_CATALOGUES["0008"]
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0008")
    engine = create_engine(sqlite_url(data_dir / "catalogue.db"))
    try:
        assert revision_of(engine) == "0008"
        assert table_counts(engine) == fixture.counts
        # the 0007 story, told again by the 0008 code
        decisions = table_rows(engine, "match_decisions")
        assert {d["decision"] for d in decisions} == {"same", "not", "unsure", "new"}
        assert sum(d["undone_at"] is not None for d in decisions) == 1
        individuals = {i["name"]: i for i in table_rows(engine, "individuals")}
        assert set(individuals) == {"Amber", "Amber-2", "Bruno", "Cleópatra", "Dora", "Eve"}
        assert individuals["Dora"]["merged_into_id"] == individuals["Cleópatra"]["id"]
        events = table_rows(engine, "identity_events")
        assert {"create", "assign", "rename", "merge", "split", "undo"} <= {e["kind"] for e in events}
        assert {j["kind"]: j["status"] for j in table_rows(engine, "jobs")} == {
            "embed": "queued", "evaluate": "succeeded", "mask": "cancelled"}

        # what 0008 brought: photos and their annotations
        photos = {p["original_name"]: p for p in table_rows(engine, "photos")}
        annotations = table_rows(engine, "images")
        per_photo = {name: [a for a in annotations if a["photo_id"] == p["id"]] for name, p in photos.items()}
        assert all(len(per_photo[name]) == 1 and per_photo[name][0]["box_source"] == "whole-photo"
                   for name in photos if not name.startswith("frame_"))
        one, two, three = (per_photo[f"frame_{k}.jpg"] for k in (1, 2, 3))
        assert [(a["box_source"], a["box_confidence"]) for a in one] == [("megadetector", 0.934),
                                                                         ("megadetector", 0.812)]
        assert [(a["bbox_x"], a["bbox_y"], a["bbox_w"], a["bbox_h"]) for a in one] == \
            [(0.06, 0.14, 0.38, 0.72), (0.56, 0.14, 0.38, 0.72)]  # the move was undone: MegaDetector's box again
        assert [a["box_source"] for a in two] == ["megadetector", "drawn"] and two[1]["box_confidence"] is None
        assert three == []  # a frame of only a person, kept without annotations
        assert photos["frame_1.jpg"]["people"] == [[0.44, 0.0, 0.12, 0.4, 0.876]]
        assert photos["frame_3.jpg"]["people"] == [[0.39, 0.1, 0.22, 0.84, 0.69]]
        assert photos["frame_2.jpg"]["detections"]["source"] == "megadetector"
        edits = table_rows(engine, "box_edits")
        assert [(e["kind"], e["annotation_id"], e["user"], e["undone_at"] is not None) for e in edits] == \
            [("add", two[1]["id"], "ben", False), ("move", one[1]["id"], "ana", True)]
        decided = [d for d in decisions if d["query_image_id"] == one[0]["id"]]
        assert [d["decision"] for d in decided] == ["same"] and one[0]["individual_id"] == individuals["Amber"]["id"]
        assert {s["image_id"] for s in table_rows(engine, "match_suggestions")} == \
            {a["id"] for a in annotations if a["individual_id"] is None}
        for p in photos.values():  # every file a row names is in the photo store
            assert (data_dir / p["blob_path"]).is_file() and (data_dir / p["thumb_path"]).is_file(), p["id"]
        for a in annotations:
            for rel in (a["blob_path"], a["thumb_path"], a["mask_path"]):
                assert rel is None or (data_dir / rel).is_file(), rel

        assert audit_chain_holds(engine) == (fixture.counts["audit_events"], None)
        head = json.loads((data_dir / "audit-head.json").read_text())
        last = table_rows(engine, "audit_events")[-1]
        assert (head["id"], head["row_hash"]) == (last["id"], last["row_hash"])
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", sorted(OLD_CATALOGUES))
def test_copying_needs_an_empty_folder_and_leaves_the_fixture_alone(tmp_path, revision):
    fixture = OLD_CATALOGUES[revision]
    before = {p: p.stat().st_mtime_ns for p in fixture.dir.rglob("*")}
    data_dir = copy_old_catalogue(tmp_path / "a", revision=revision)
    assert sorted(p.relative_to(data_dir) for p in data_dir.rglob("*")) == \
        sorted(p.relative_to(fixture.dir) for p in fixture.dir.rglob("*"))
    (data_dir / "catalogue.db").write_bytes(b"changed")
    with pytest.raises(ValueError, match="not empty"):
        copy_old_catalogue(data_dir, revision=revision)
    assert {p: p.stat().st_mtime_ns for p in fixture.dir.rglob("*")} == before


@pytest.mark.postgres
@pytest.mark.parametrize("revision", sorted(OLD_CATALOGUES))
def test_the_old_catalogue_loads_into_postgres_at_its_revision_with_every_row(pg_db_url, revision):
    fixture = OLD_CATALOGUES[revision]
    counts = load_old_catalogue_into_postgres(fixture.db, pg_db_url, revision=revision)
    assert counts == fixture.counts
    source = create_engine(sqlite_url(fixture.db, read_only=True))
    target = create_engine(pg_db_url)
    try:
        assert target.dialect.name == "postgresql"
        assert revision_of(target) == revision
        assert table_counts(target) == fixture.counts
        for table in fixture.counts:  # the same values, ids and references included
            assert table_rows(target, table) == table_rows(source, table), table
        assert audit_chain_holds(target) == (fixture.counts["audit_events"], None)
        assert pg_next_ids(target) == {name: n + 1 for name, n in max_ids(target).items()}
        with pytest.raises(ValueError, match="not empty"):
            load_old_catalogue_into_postgres(fixture.db, pg_db_url, revision=revision)
    finally:
        source.dispose()
        target.dispose()


@pytest.mark.postgres
def test_loading_into_postgres_refuses_a_fixture_at_another_revision(pg_db_url):
    with pytest.raises(ValueError, match="is at schema 0008, not 0007"):
        load_old_catalogue_into_postgres(OLD_CATALOGUES["0008"].db, pg_db_url)  # the revision left at 0007
    engine = create_engine(pg_db_url)
    try:
        assert table_counts(engine) == {}  # nothing written
    finally:
        engine.dispose()
