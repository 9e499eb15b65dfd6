"""Migration 0008 (annotations) on a catalogue built with the schema before it (tests/fixtures/catalogue_0007:
decisions of every kind, an undone decision, merge, split, undo, rename, masks, a benchmark, an evaluation,
jobs and the audit trail), on SQLite and PostgreSQL: every row and id kept, every photo one whole-photo
annotation with its own id, the audit chain intact, and the catalogue usable afterwards."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine

from db.records.annotations import add_box, annotation_for_photo, list_annotations
from db.audit import verify_chain
from db.session import head_revision, open_catalogue
from tests.old_catalogue import (
    FIXTURE_DB,
    OLD_CATALOGUE_COUNTS,
    copy_old_catalogue,
    load_old_catalogue_into_postgres,
    revision_of,
    sqlite_url,
    table_counts,
    table_rows,
)
from core.annotations import Box

KEPT_AS_THEY_WERE = ("match_decisions", "identity_events", "audit_events", "individuals", "sightings", "evaluations",
                     "models", "benchmarks", "benchmark_images", "match_suggestions", "jobs", "users", "species")
FILE_COLUMNS = ("content_hash", "original_name", "blob_path", "thumb_path", "format", "mode", "width", "height",
                "size_bytes", "exif_time", "gps_lat", "gps_lon", "sighting_id")


def _check_upgraded(url: str, before: dict[str, list[dict]], data_dir) -> None:
    engine = create_engine(url)
    try:
        assert revision_of(engine) == head_revision()  # 0008, and every later migration
        counts = table_counts(engine)
        for table, n in OLD_CATALOGUE_COUNTS.items():
            if table not in ("alembic_version", "audit_events"):
                assert counts[table] == n, table
        assert counts["photos"] == OLD_CATALOGUE_COUNTS["images"] and counts["box_edits"] == 0
        for table in KEPT_AS_THEY_WERE:
            after = table_rows(engine, table)[:len(before[table])]
            assert [{k: row[k] for k in old} for row, old in zip(after, before[table])] == before[table], table
        photos = {p["id"]: p for p in table_rows(engine, "photos")}
        for old, ann in zip(before["images"], table_rows(engine, "images")):
            assert ann["id"] == old["id"] and ann["photo_id"] == old["id"]  # the photo keeps the image's id
            assert (ann["bbox_x"], ann["bbox_y"], ann["bbox_w"], ann["bbox_h"]) == (0, 0, 1, 1)
            assert ann["box_source"] == "whole-photo" and ann["box_confidence"] is None
            assert {k: v for k, v in ann.items() if k in old} == old  # individual, flank, mask, version ...
            assert {c: photos[ann["id"]][c] for c in FILE_COLUMNS} == {c: old[c] for c in FILE_COLUMNS}
    finally:
        engine.dispose()
    cat = open_catalogue(data_dir, url=url)
    assert verify_chain(cat).ok
    assert len(list_annotations(cat)) == OLD_CATALOGUE_COUNTS["images"]
    assert annotation_for_photo(cat, 3) == 3  # a photo id still means its one animal
    new = add_box(cat, 3, Box(0.1, 0.1, 0.5, 0.5), user="ana")  # and the upgraded catalogue takes new boxes
    assert new > OLD_CATALOGUE_COUNTS["images"] and verify_chain(cat).ok


def _rows(url: str) -> dict[str, list[dict]]:
    engine = create_engine(url)
    try:
        return {t: table_rows(engine, t) for t in (*KEPT_AS_THEY_WERE, "images")}
    finally:
        engine.dispose()


def test_sqlite_catalogue_before_annotations_upgrades_with_nothing_lost(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data")
    url = sqlite_url(data_dir / "catalogue.db")
    before = _rows(url)
    open_catalogue(data_dir)  # opening migrates
    _check_upgraded(url, before, data_dir)


@pytest.mark.postgres
def test_postgres_catalogue_before_annotations_upgrades_with_nothing_lost(pg_db_url, tmp_path):
    load_old_catalogue_into_postgres(FIXTURE_DB, pg_db_url)
    before = _rows(pg_db_url)
    data_dir = copy_old_catalogue(tmp_path / "rosette-data")  # the photo files
    open_catalogue(data_dir, url=pg_db_url)
    _check_upgraded(pg_db_url, before, data_dir)
