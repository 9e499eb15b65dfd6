"""``rosette catalogue copy`` carries the largest id each table ever handed out: a deployment deleted on SQLite keeps
its id from the next deployment made on PostgreSQL after the copy, and one deleted there keeps it from the next made
on SQLite after copying back (the copy alone would restart each id after the largest one copied)."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text

from db.audit import acting_as
from db.catalogue_copy import copy_catalogue
from db.models import Deployment
from db.session import open_catalogue
from tests.old_catalogue import sqlite_url

pytestmark = pytest.mark.postgres


def _add(cat, key: str) -> int:
    with acting_as("ana"), cat.unit_of_work() as s:
        dep = Deployment(key=key, start="2024-07-01T00:00:00-04:00", end="2024-07-31T00:00:00-04:00")
        s.add(dep)
        s.commit()
        return dep.id


def _delete(cat, key: str) -> None:
    with acting_as("ana"), cat.unit_of_work() as s:
        s.delete(s.scalars(select(Deployment).where(Deployment.key == key)).one())
        s.commit()


def test_a_deleted_rows_id_is_not_given_again_after_copying_either_way(tmp_path, pg_db_url):
    cat = open_catalogue(tmp_path / "data")
    assert (_add(cat, "A"), _add(cat, "B")) == (1, 2)
    _delete(cat, "B")  # the largest deployment id ever used is held by no row now

    report = copy_catalogue(cat, pg_db_url)
    assert report.ok, report
    on_pg = open_catalogue(tmp_path / "data", url=pg_db_url)
    assert _add(on_pg, "C") == 3  # not B's id
    _delete(on_pg, "C")

    back_url = sqlite_url(tmp_path / "back" / "catalogue.db")
    (tmp_path / "back").mkdir()
    report = copy_catalogue(on_pg, back_url)
    assert report.ok, report
    back = open_catalogue(tmp_path / "data", url=back_url)
    with back.engine.connect() as conn:
        assert conn.execute(text("SELECT seq FROM sqlite_sequence WHERE name = 'deployments'")).scalar() == 3
    assert _add(back, "D") == 4  # not C's id
    for c in (cat, on_pg, back):
        c.close()
