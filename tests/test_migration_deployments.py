"""Migration 0009 (deployments) on a catalogue built with the schema before it (tests/fixtures/catalogue_0008: the
0007 story plus camera-trap frames with MegaDetector boxes, a photo with two animals and a person box, a photo of
only a person, a drawn box, a box move undone, a decision on one animal of two), on SQLite and PostgreSQL: every
row and every old column kept, the new columns empty, no deployment, the audit chain intact, and the catalogue
taking a deployment and a photo of it afterwards. Going back to 0008 is refused while a deployment exists and
gives the old catalogue back when none does."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, select
from sqlalchemy.exc import IntegrityError

from db.audit import acting_as, verify_chain
from db.models import Deployment, Image, Photo, Sighting
from db.session import head_revision, open_catalogue
from tests.old_catalogue import (
    OLD_CATALOGUES,
    audit_chain_holds,
    copy_old_catalogue,
    downgrade_to_revision,
    load_old_catalogue_into_postgres,
    revision_of,
    sqlite_url,
    table_counts,
    table_rows,
)

OLD = OLD_CATALOGUES["0008"]
#: What migration 0009 adds to the tables that were there (and nothing else).
NEW_COLUMNS = {
    "individuals": {"sex", "life_stage"},
    "sightings": {"deployment_id", "event_key"},
    "photos": {"deployment_id", "taken_at", "media_key", "media_details"},
    "images": {"observation_key", "life_stage", "sex", "observation_details"},
}
#: What later migrations add to those tables (empty after the upgrade too): 0011, the species' common name.
LATER_COLUMNS = {"species": {"common_name"}}
FRAME_1 = 13  # the photo holding two MegaDetector animals and a person box (photo id in the fixture)


def _snapshot(url: str) -> dict[str, list[dict]]:
    """Every row of every table but ``alembic_version``."""
    engine = create_engine(url)
    try:
        return {t: table_rows(engine, t) for t in OLD.counts if t != "alembic_version"}
    finally:
        engine.dispose()


def _columns(url: str) -> dict[str, set[str]]:
    engine = create_engine(url)
    try:
        insp = inspect(engine)
        return {t: {c["name"] for c in insp.get_columns(t)} for t in insp.get_table_names()}
    finally:
        engine.dispose()


def _check_upgraded(url: str, before: dict[str, list[dict]], old_columns: dict[str, set[str]]) -> None:
    assert before["photos"] and before["images"]  # the snapshot is the fixture's, not an empty database
    engine = create_engine(url)
    try:
        assert revision_of(engine) == head_revision()  # 0009, and every later migration
        counts = table_counts(engine)
        assert counts["deployments"] == 0
        for table, n in OLD.counts.items():
            if table not in ("alembic_version", "audit_events"):
                assert counts[table] == n, table
        assert counts["audit_events"] >= OLD.counts["audit_events"]
        columns = _columns(url)
        for table, old in old_columns.items():
            if table == "alembic_version":
                continue
            added = NEW_COLUMNS.get(table, set()) | LATER_COLUMNS.get(table, set())
            assert columns[table] - old == added, table
            assert old <= columns[table], table  # no column lost
            after = table_rows(engine, table)[:len(before[table])]
            assert [{k: row[k] for k in old} for row in after] == before[table], table
            assert all(row[c] is None for row in after for c in added), table
    finally:
        engine.dispose()


def _use_deployments(cat) -> None:
    """The upgraded catalogue takes a deployment, a photo and an event of it; its keys are unique and a photo
    cannot name a deployment that does not exist."""
    with acting_as("ana"), cat.unit_of_work() as s:
        dep = Deployment(key="CT-01-2024-05", location_id="CT-01", location_name="Porto Jofre", lat=-17.3602,
                         lon=-56.7755, start="2024-05-01T06:00:00-04:00", end="2024-06-30T18:00:00-04:00",
                         camera_id="CAM-7731", camera_model="Reconyx-HyperFire2",
                         details={"habitat": "gallery forest", "cameraHeight": 0.5})
        s.add(dep)
        s.flush()
        photo = s.get(Photo, FRAME_1)
        photo.deployment = dep
        photo.taken_at = "2024-05-02T21:14:05-04:00"
        photo.media_key = "m-frame-1"
        photo.media_details = {"captureMethod": "activityDetection"}
        event = Sighting(key="E-0001", deployment_id=dep.id, event_key="E-0001", date="2024-05-02T21:14:05-04:00")
        s.add(event)
        s.flush()
        photo.sighting_id = event.id
        for ann in photo.annotations:
            ann.sighting_id = event.id
        first = photo.annotations[0]
        first.observation_key, first.life_stage, first.sex = "o-1", "adult", "female"
        first.observation_details = {"behavior": "walking"}
        s.commit()
        dep_id = dep.id
    with cat.unit_of_work() as s:
        photo = s.get(Photo, FRAME_1)
        assert photo.deployment is not None and photo.deployment.id == dep_id
        assert (photo.deployment.key, photo.deployment.lat, photo.deployment.details) == \
            ("CT-01-2024-05", -17.3602, {"habitat": "gallery forest", "cameraHeight": 0.5})
        assert (photo.taken_at, photo.media_key, photo.media_details) == \
            ("2024-05-02T21:14:05-04:00", "m-frame-1", {"captureMethod": "activityDetection"})
        assert [a.sighting_id for a in photo.annotations] == [photo.sighting_id] * 2
        assert s.get(Sighting, photo.sighting_id).deployment_id == dep_id
        first = s.scalars(select(Image).where(Image.observation_key == "o-1")).one()
        assert (first.photo_id, first.life_stage, first.sex) == (FRAME_1, "adult", "female")
    with cat.unit_of_work() as s, pytest.raises(IntegrityError):  # deploymentID is unique
        s.add(Deployment(key="CT-01-2024-05", start="2024-07-01T00:00:00-04:00", end="2024-07-02T00:00:00-04:00"))
        s.commit()
    with cat.unit_of_work() as s, pytest.raises(IntegrityError):  # mediaID is unique
        s.get(Photo, FRAME_1 + 1).media_key = "m-frame-1"
        s.commit()
    with cat.unit_of_work() as s, pytest.raises(IntegrityError):  # the foreign key is there
        s.get(Photo, FRAME_1 + 1).deployment_id = dep_id + 100
        s.commit()
    with cat.unit_of_work() as s:
        assert len(s.scalars(select(Deployment)).all()) == 1
        assert s.get(Photo, FRAME_1 + 1).deployment_id is None
    check = verify_chain(cat)
    assert check.ok, check


def test_sqlite_catalogue_before_deployments_upgrades_with_nothing_lost(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0008")
    url = sqlite_url(data_dir / "catalogue.db")
    before, old_columns = _snapshot(url), _columns(url)
    assert "deployments" not in old_columns and _revision(url) == "0008"
    cat = open_catalogue(data_dir)  # opening migrates
    _check_upgraded(url, before, old_columns)
    check = verify_chain(cat)
    assert check.ok and check.rows >= OLD.counts["audit_events"], check
    _use_deployments(cat)


@pytest.mark.postgres
def test_postgres_catalogue_before_deployments_upgrades_with_nothing_lost(pg_db_url, tmp_path):
    load_old_catalogue_into_postgres(OLD.db, pg_db_url, revision="0008")
    before, old_columns = _snapshot(pg_db_url), _columns(pg_db_url)
    assert "deployments" not in old_columns
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0008")  # the photo files, the audit head
    cat = open_catalogue(data_dir, url=pg_db_url)
    _check_upgraded(pg_db_url, before, old_columns)
    check = verify_chain(cat)
    assert check.ok and check.rows >= OLD.counts["audit_events"], check
    _use_deployments(cat)


def test_going_back_to_0008_without_deployments_gives_the_old_catalogue_back(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0008")
    url = sqlite_url(data_dir / "catalogue.db")
    before, old_columns = _snapshot(url), _columns(url)
    open_catalogue(data_dir).close()  # opening migrates to 0009
    assert "deployments" in _columns(url)
    audit_after_upgrade = _rows(url, "audit_events")
    downgrade_to_revision(url, "0008")
    assert _revision(url) == "0008"
    assert _columns(url) == old_columns
    restored = _snapshot(url)
    assert {t: rows for t, rows in restored.items() if t != "audit_events"} == \
        {t: rows for t, rows in before.items() if t != "audit_events"}
    assert restored["audit_events"] == audit_after_upgrade  # whatever opening wrote stays
    assert restored["audit_events"][:len(before["audit_events"])] == before["audit_events"]
    engine = create_engine(url)
    try:
        assert audit_chain_holds(engine) == (len(restored["audit_events"]), None)
    finally:
        engine.dispose()


def test_going_back_to_0008_is_refused_while_a_deployment_exists(tmp_path):
    data_dir = copy_old_catalogue(tmp_path / "rosette-data", revision="0008")
    url = sqlite_url(data_dir / "catalogue.db")
    old_columns = _columns(url)
    cat = open_catalogue(data_dir)
    with acting_as("ana"), cat.unit_of_work() as s:
        s.add(Deployment(key="CT-02-2024", start="2024-05-01T00:00:00-04:00", end="2024-05-31T00:00:00-04:00"))
        s.commit()
    with_deployment = _snapshot(url) | {"deployments": _rows(url, "deployments")}
    cat.close()

    with pytest.raises(RuntimeError, match=r"1 deployment\(s\) are in the catalogue"):
        downgrade_to_revision(url, "0008")
    assert _revision(url) == head_revision()  # nothing changed
    assert _snapshot(url) | {"deployments": _rows(url, "deployments")} == with_deployment

    cat = open_catalogue(data_dir)  # the curator removes it; then going back works
    with acting_as("ana"), cat.unit_of_work() as s:
        s.delete(s.scalars(select(Deployment)).one())
        s.commit()
    cat.close()
    downgrade_to_revision(url, "0008")
    assert _revision(url) == "0008"
    assert _columns(url) == old_columns


def _rows(url: str, table: str) -> list[dict]:
    engine = create_engine(url)
    try:
        return table_rows(engine, table)
    finally:
        engine.dispose()


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        return revision_of(engine)
    finally:
        engine.dispose()
