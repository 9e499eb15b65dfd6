"""Catalogue operations: create, rename, assign, merge, split and their undo."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from sqlalchemy import inspect, select

from db import catalogue as cat_ops
from db.models import EventKind, IdentityEvent, Image
from db.session import open_catalogue


@pytest.fixture()
def cat(data_dir):
    c = open_catalogue(data_dir)
    yield c
    c.close()


def _add_image(session, n: int, individual_id: int | None = None) -> Image:
    img = Image(content_hash=f"{n:064x}", original_name=f"img{n}.jpg", blob_path=f"images/x/{n}.jpg",
                format="JPEG", mode="RGB", width=10, height=10, size_bytes=100, individual_id=individual_id)
    session.add(img)
    session.flush()
    return img


def _assignment(session) -> dict[int, int | None]:
    return {i.id: i.individual_id for i in session.scalars(select(Image).order_by(Image.id))}


@contextmanager
def _at_revision(data_dir, revision: str):
    """An open transaction on a new catalogue migrated only up to ``revision`` (committed on exit)."""
    from alembic import command
    from alembic.config import Config

    from db.session import MIGRATIONS_DIR, make_engine

    engine = make_engine(f"sqlite:///{data_dir / 'catalogue.db'}")
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)
        yield conn
    engine.dispose()


def _head_revision() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from db.session import MIGRATIONS_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(cfg).get_current_head()


def test_head_revision_is_the_newest_migration():
    assert _head_revision() == "0012"


def test_open_catalogue_sets_wal_foreign_keys_and_migrates(cat):
    with cat.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar() == _head_revision()
    tables = set(inspect(cat.engine).get_table_names())
    assert {"individuals", "sightings", "images", "identity_events", "match_decisions", "models",
            "evaluations", "jobs", "users", "benchmarks"} <= tables


def test_migrations_match_models(cat):
    """The Alembic head creates exactly the schema the models declare (no pending autogenerate diff)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from db.models import Base

    with cat.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_upgrade_from_the_first_schema_keeps_jobs_and_models(data_dir):
    """A catalogue made by revision 0001 (jobs and models rows in it) upgrades to head: old jobs get a
    queue (training-like kinds heavy) and zero attempts, models keep their rows with no snapshot."""
    with _at_revision(data_dir, "0001") as conn:
        conn.exec_driver_sql("INSERT INTO jobs (kind, params, status, progress, cancel_requested, created_at) "
                             "VALUES ('evaluate', '{}', 'failed', 0, 0, '2026-01-01'), "
                             "('mask', '{}', 'queued', 0, 0, '2026-01-01')")
        conn.exec_driver_sql("INSERT INTO models (name, backbone, config, status, created_at) "
                             "VALUES ('efficientnet_lite0', 'efficientnet_lite0', '{}', 'active', '2026-01-01')")
        # an evaluation referencing the model: rebuilding the models table must not trip its foreign key
        conn.exec_driver_sql("INSERT INTO evaluations (model_id, model_name, model_config, benchmark_name, kind, "
                             "variant, metrics, created_at) VALUES (1, 'efficientnet_lite0', '{}', 'b', 'retrieval', "
                             "'full_rgb', '{}', '2026-01-01')")
    cat = open_catalogue(data_dir)  # migrates to head
    with cat.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT kind, queue, attempts, max_attempts FROM jobs ORDER BY id").all()
        assert [tuple(r) for r in rows] == [("evaluate", "heavy", 0, 2), ("mask", "light", 0, 2)]
        model = conn.exec_driver_sql("SELECT name, loss, data_snapshot, job_id FROM models").one()
        assert tuple(model) == ("efficientnet_lite0", None, None, None)
        assert conn.exec_driver_sql("SELECT model_id FROM evaluations").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    from jobs import queue

    assert queue.claim_next(cat, queue="light") == 2
    cat.close()


def test_upgrade_from_0002_puts_everything_in_one_default_species(data_dir):
    """A catalogue made by revision 0002 (individuals, photos, a benchmark, an active model) upgrades to head:
    one species 'default' holds every individual and photo, the benchmark, and the active model."""
    with _at_revision(data_dir, "0002") as conn:
        conn.exec_driver_sql("INSERT INTO individuals (id, name, active, created_at) VALUES (1, 'Ximena', 1, '2026-01-01')")
        conn.exec_driver_sql(
            "INSERT INTO images (id, content_hash, original_name, blob_path, format, mode, width, height, size_bytes, "
            "flank, individual_id, imported_at) VALUES (1, 'h1', 'a.jpg', 'images/h1.jpg', 'JPEG', 'RGB', 4, 4, 10, "
            "'left', 1, '2026-01-01')")
        conn.exec_driver_sql("INSERT INTO models (id, name, backbone, config, status, created_at) "
                             "VALUES (7, 'efficientnet_lite0', 'efficientnet_lite0', '{}', 'active', '2026-01-01')")
        conn.exec_driver_sql("INSERT INTO benchmarks (name, split_kind, config, created_at) "
                             "VALUES ('b', 'identity', '{}', '2026-01-01')")
    cat = open_catalogue(data_dir)
    with cat.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT id, name, active_model_id FROM species").all() == [(1, "default", 7)]
        assert conn.exec_driver_sql("SELECT species_id FROM individuals").scalar() == 1
        assert conn.exec_driver_sql("SELECT species_id FROM images").scalar() == 1
        assert conn.exec_driver_sql("SELECT species_id FROM benchmarks").scalar() == 1
    with cat.unit_of_work() as s:  # new rows get the default species too
        ind = cat_ops.create_individual(s, "Yara", user="ana")
        s.commit()
        assert ind.species_id == 1
    cat.close()


def test_reopen_is_idempotent(data_dir):
    c1 = open_catalogue(data_dir)
    with c1.unit_of_work() as s:
        cat_ops.create_individual(s, "Ximena", user="ana")
        s.commit()
    c1.close()
    c2 = open_catalogue(data_dir)
    with c2.unit_of_work() as s:
        assert cat_ops.find_individual_by_name(s, "Ximena") is not None
    c2.close()


def test_unit_of_work_rolls_back_unless_committed(cat):
    with cat.unit_of_work() as s:
        cat_ops.create_individual(s, "Ghost", user="ana")
    with cat.unit_of_work() as s:
        assert cat_ops.find_individual_by_name(s, "Ghost") is None


def test_create_rename_and_undo(cat):
    with cat.unit_of_work() as s:
        ind = cat_ops.create_individual(s, "Pintada", user="ana")
        ev = cat_ops.rename_individual(s, ind.id, "Pintada II", user="bia")
        assert ind.name == "Pintada II" and ev.user == "bia" and ev.payload == {"old": "Pintada", "new": "Pintada II"}
        cat_ops.undo_event(s, ev.id, user="ana")
        assert ind.name == "Pintada"
        with pytest.raises(cat_ops.ConflictError):
            cat_ops.undo_event(s, ev.id, user="ana")
        s.commit()


def test_duplicate_and_empty_names_are_refused(cat):
    with cat.unit_of_work() as s:
        cat_ops.create_individual(s, "A", user="u")
        with pytest.raises(cat_ops.CatalogueError, match="already exists"):
            cat_ops.create_individual(s, "A", user="u")
        with pytest.raises(cat_ops.CatalogueError, match="non-empty"):
            cat_ops.rename_individual(s, 1, "   ", user="u")


def test_assign_unassign_and_undo(cat):
    with cat.unit_of_work() as s:
        a = cat_ops.create_individual(s, "A", user="u")
        b = cat_ops.create_individual(s, "B", user="u")
        img = _add_image(s, 1, a.id)
        ev = cat_ops.assign_image(s, img.id, b.id, user="u")
        assert img.individual_id == b.id and ev.kind == EventKind.assign
        ev2 = cat_ops.assign_image(s, img.id, None, user="u")
        assert img.individual_id is None and ev2.kind == EventKind.unassign
        with pytest.raises(cat_ops.ConflictError):
            cat_ops.undo_event(s, ev.id, user="u")  # a later change touched the image
        cat_ops.undo_event(s, ev2.id, user="u")
        cat_ops.undo_event(s, ev.id, user="u")
        assert img.individual_id == a.id


def test_merge_moves_images_and_undo_restores_exact_assignment(cat):
    with cat.unit_of_work() as s:
        a = cat_ops.create_individual(s, "A", user="u")
        b = cat_ops.create_individual(s, "B", user="u")
        c = cat_ops.create_individual(s, "C", user="u")
        for n, owner in enumerate([a, a, b, c, None, a]):
            _add_image(s, n, owner.id if owner else None)
        before = _assignment(s)
        ev = cat_ops.merge_individuals(s, a.id, b.id, user="u")
        after = _assignment(s)
        assert sum(v == b.id for v in after.values()) == 4
        assert not a.active and a.merged_into_id == b.id
        assert ev.payload["image_ids"] == sorted(k for k, v in before.items() if v == a.id)
        with pytest.raises(cat_ops.CatalogueError):
            cat_ops.assign_image(s, 5, a.id, user="u")  # merged individuals take no images
        cat_ops.undo_event(s, ev.id, user="u")
        assert _assignment(s) == before
        assert a.active and a.merged_into_id is None
        s.commit()


def test_merge_refuses_self_and_inactive(cat):
    with cat.unit_of_work() as s:
        a = cat_ops.create_individual(s, "A", user="u")
        b = cat_ops.create_individual(s, "B", user="u")
        with pytest.raises(cat_ops.CatalogueError, match="itself"):
            cat_ops.merge_individuals(s, a.id, a.id, user="u")
        cat_ops.merge_individuals(s, a.id, b.id, user="u")
        with pytest.raises(cat_ops.CatalogueError, match="active"):
            cat_ops.merge_individuals(s, a.id, b.id, user="u")


def test_undo_merge_refused_after_images_moved(cat):
    with cat.unit_of_work() as s:
        a = cat_ops.create_individual(s, "A", user="u")
        b = cat_ops.create_individual(s, "B", user="u")
        img = _add_image(s, 1, a.id)
        ev = cat_ops.merge_individuals(s, a.id, b.id, user="u")
        cat_ops.assign_image(s, img.id, None, user="u")
        with pytest.raises(cat_ops.ConflictError):
            cat_ops.undo_event(s, ev.id, user="u")


def test_split_and_undo(cat):
    with cat.unit_of_work() as s:
        a = cat_ops.create_individual(s, "A", user="u")
        b = cat_ops.create_individual(s, "B", user="u")
        imgs = [_add_image(s, n, (a if n < 3 else b).id) for n in range(5)]
        before = _assignment(s)
        new, ev = cat_ops.split_images(s, [imgs[1].id, imgs[2].id, imgs[4].id], new_name="A-bis", user="u")
        assert new.name == "A-bis"
        assert [i.individual_id for i in imgs] == [a.id, new.id, new.id, b.id, new.id]
        cat_ops.undo_event(s, ev.id, user="u")
        assert _assignment(s) == before
        assert not new.active
        names = [x.name for x in cat_ops.list_individuals(s)]
        assert "A-bis" not in names and names == ["A", "B"]
        with pytest.raises(cat_ops.CatalogueError):
            cat_ops.split_images(s, [], user="u")


def test_history_and_last_undoable(cat):
    with cat.unit_of_work() as s:
        a = cat_ops.create_individual(s, "A", user="ana")
        ev = cat_ops.rename_individual(s, a.id, "AA", user="bia")
        assert cat_ops.last_undoable_event(s).id == ev.id
        undo = cat_ops.undo_event(s, ev.id, user="ana")
        kinds = [e.kind for e in cat_ops.history(s, individual_id=a.id)]
        assert kinds == [EventKind.undo, EventKind.rename, EventKind.create]
        assert undo.payload == {"undid": ev.id, "kind": "rename"}
        assert cat_ops.last_undoable_event(s).kind == EventKind.create
        assert s.scalar(select(IdentityEvent).where(IdentityEvent.id == ev.id)).undone_by_id == undo.id


def test_list_individuals_counts_and_stats(cat):
    with cat.unit_of_work() as s:
        a = cat_ops.create_individual(s, "A", user="u")
        cat_ops.create_individual(s, "B", user="u")
        _add_image(s, 1, a.id)
        _add_image(s, 2, a.id)
        summaries = {x.name: x for x in cat_ops.list_individuals(s)}
        assert summaries["A"].n_images == 2 and summaries["B"].n_images == 0
        assert cat_ops.catalogue_stats(s) == {"individuals": 2, "images": 2, "annotations": 2, "sightings": 0,
                                               "masks": 0, "decisions": 0}
