"""The catalogues made before a migration (``tests/fixtures/catalogue_<revision>/``), for upgrade tests.

Each fixture is a Rosette data directory written by the code of its time through the service functions the command
line and the web app call, never by hand-written rows.

``tests/fixtures/catalogue_0007/`` (before migration 0008, annotations) was written at schema revision 0007 by the
code of commit 912e1b0 (``tests/fixtures/build_catalogue_0007.py`` says how it was built and how to build it
again): 12 photos in 3 sightings, 6 individuals (one merged away, one split out, a merge undone), match decisions
of every kind (one undone), flanks, masks (alpha and GrabCut), a benchmark, an evaluation, jobs, stored best
matches and the hash-chained audit trail of all of it.

``tests/fixtures/catalogue_0008/`` (before migration 0009, deployments) was written at revision 0008 by the code of
commit 1759791 (``tests/fixtures/build_catalogue_0008.py``): the same story, then what 0008 brought: camera-trap
frames imported with a MegaDetector JSON (a photo with two animals and a person box, a photo with one, a photo of
only a person kept without annotations), a drawn box, a box move undone and a decision on one animal of a photo
holding two.

``tests/fixtures/catalogue_0009/`` (before migration 0010, ids never used twice) was written at revision 0009 by the
code of commit 40b030c (``tests/fixtures/build_catalogue_0009.py``): the 0008 story, then deployments typed in (the
newest deleted), the newest box deleted and a box drawn on another photo (SQLite gave it the deleted box's id), an
animal deleted and the delete undone, a box drawn and deleted (the largest annotation id ever used, held by no row)
and a species merged away (deleted). :data:`OLD_CATALOGUES` holds them all, by revision (:class:`OldCatalogue`:
folder, database file, rows per table).

- :func:`copy_old_catalogue` copies one somewhere a test may change it (opening it with ``open_catalogue``
  migrates that copy, never the fixture);
- :func:`load_old_catalogue_into_postgres` makes the same catalogue on an empty PostgreSQL database: the schema at
  the fixture's revision by Alembic, then every row of every table, ids kept; the database is left at that
  revision, for a test to upgrade;
- :data:`OLD_CATALOGUE_COUNTS` is the number of rows per table (``alembic_version`` included) of the 0007 fixture,
  what both hold (``OLD_CATALOGUES[revision].counts`` for any of them).

The revision is a keyword (``revision="0008"``); left out it is ``"0007"`` (:data:`OLD_REVISION`), the first
fixture, whose names (:data:`FIXTURE_DIR`, :data:`FIXTURE_DB`) stay as they were.

Nothing here imports the models of today's code: the tables are reflected from the databases themselves, so the
helpers keep working whatever later migrations add.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, Table, bindparam, create_engine, inspect, select, text, update

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE_DIR = FIXTURES / "catalogue_0007"
FIXTURE_DB = FIXTURE_DIR / "catalogue.db"  # the data directory's database file (``db.session``: catalogue.db)
OLD_REVISION = "0007"

#: Rows per table in the 0007 fixture (and in its PostgreSQL copy).
OLD_CATALOGUE_COUNTS: dict[str, int] = {
    "alembic_version": 1,
    "audit_events": 79,
    "benchmark_images": 10,
    "benchmarks": 1,
    "embedding_sets": 0,
    "evaluations": 1,
    "identity_events": 23,
    "images": 12,
    "individuals": 6,
    "jobs": 3,
    "match_decisions": 5,
    "match_suggestions": 2,
    "models": 1,
    "sightings": 3,
    "species": 1,
    "users": 3,
}

#: Rows per table in the 0008 fixture (and in its PostgreSQL copy).
CATALOGUE_0008_COUNTS: dict[str, int] = {
    "alembic_version": 1,
    "audit_events": 86,
    "benchmark_images": 10,
    "benchmarks": 1,
    "box_edits": 2,
    "embedding_sets": 0,
    "evaluations": 1,
    "identity_events": 24,
    "images": 16,
    "individuals": 6,
    "jobs": 3,
    "match_decisions": 6,
    "match_suggestions": 5,
    "models": 1,
    "photos": 15,
    "sightings": 3,
    "species": 1,
    "users": 3,
}


#: Rows per table in the 0009 fixture (and in its PostgreSQL copy).
CATALOGUE_0009_COUNTS: dict[str, int] = {
    "alembic_version": 1,
    "audit_events": 103,
    "benchmark_images": 10,
    "benchmarks": 1,
    "box_edits": 7,
    "deployments": 1,
    "embedding_sets": 0,
    "evaluations": 1,
    "identity_events": 27,
    "images": 16,
    "individuals": 6,
    "jobs": 3,
    "match_decisions": 6,
    "match_suggestions": 3,
    "models": 1,
    "photos": 15,
    "sightings": 3,
    "species": 1,
    "users": 3,
}


@dataclass(frozen=True)
class OldCatalogue:
    """One fixture: the data directory written at ``revision`` by the code of that time."""

    revision: str
    dir: Path
    counts: dict[str, int]

    @property
    def db(self) -> Path:
        """Its database file (``db.session``: catalogue.db)."""
        return self.dir / "catalogue.db"


#: The fixtures by the revision they were written at.
OLD_CATALOGUES: dict[str, OldCatalogue] = {
    "0007": OldCatalogue("0007", FIXTURE_DIR, OLD_CATALOGUE_COUNTS),
    "0008": OldCatalogue("0008", FIXTURES / "catalogue_0008", CATALOGUE_0008_COUNTS),
    "0009": OldCatalogue("0009", FIXTURES / "catalogue_0009", CATALOGUE_0009_COUNTS),
}


def old_catalogue(revision: str) -> OldCatalogue:
    """The fixture written at ``revision``; an unknown one is refused with the list of those there are."""
    try:
        return OLD_CATALOGUES[revision]
    except KeyError:
        raise ValueError(f"no old catalogue at revision {revision!r}; there are {', '.join(OLD_CATALOGUES)}") \
            from None


# --------------------------------------------------------------------------- the data directory


def copy_old_catalogue(dest_dir: str | os.PathLike[str], *, revision: str = OLD_REVISION) -> Path:
    """Copy the data directory of the fixture written at ``revision`` (database, photo store, audit head, job logs)
    into ``dest_dir`` (created if missing; it must be empty) and return it as the data directory to open. The copy
    is writable, whatever the checkout's file modes."""
    fixture = old_catalogue(revision)
    dest = Path(dest_dir)
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"{dest} is not empty; copy the old catalogue into an empty folder")
    shutil.copytree(fixture.dir, dest, dirs_exist_ok=True)
    for path in [dest, *dest.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | stat.S_IWUSR | stat.S_IRUSR | (stat.S_IXUSR if path.is_dir() else 0))
    return dest


def sqlite_url(sqlite_path: str | os.PathLike[str], *, read_only: bool = False) -> str:
    path = Path(sqlite_path).resolve()
    return f"sqlite:///file:{path}?mode=ro&uri=true" if read_only else f"sqlite:///{path}"


# --------------------------------------------------------------------------- reading a database


def revision_of(engine: Engine) -> str | None:
    """The Alembic revision the database is at (None: no ``alembic_version`` table, or no row)."""
    with engine.connect() as conn:
        if "alembic_version" not in inspect(conn).get_table_names():
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def table_counts(engine: Engine) -> dict[str, int]:
    """Rows per table (every table of the database, ``alembic_version`` included), by raw SQL."""
    with engine.connect() as conn:
        names = sorted(inspect(conn).get_table_names())
        return {name: int(conn.execute(text(f'SELECT count(*) FROM "{name}"')).scalar_one()) for name in names}


def table_rows(engine: Engine, table: str) -> list[dict[str, Any]]:
    """Every row of ``table`` ordered by its primary key, as dicts of Python values (types read by reflection)."""
    meta = MetaData()
    t = Table(table, meta, autoload_with=engine)
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(select(t).order_by(*t.primary_key.columns))]


def rows_at(url: str, tables) -> dict[str, list[dict[str, Any]]]:
    """Every row of each of ``tables`` (but ``alembic_version``) of the database at ``url``, by table."""
    engine = create_engine(url)
    try:
        return {t: table_rows(engine, t) for t in tables if t != "alembic_version"}
    finally:
        engine.dispose()


def columns_at(url: str) -> dict[str, list[str]]:
    """The column names of every table of the database at ``url``."""
    engine = create_engine(url)
    try:
        insp = inspect(engine)
        return {t: [c["name"] for c in insp.get_columns(t)] for t in insp.get_table_names()}
    finally:
        engine.dispose()


def revision_at(url: str) -> str | None:
    """The Alembic revision of the database at ``url`` (None before any)."""
    engine = create_engine(url)
    try:
        return revision_of(engine)
    finally:
        engine.dispose()


def audit_chain_holds(engine: Engine) -> tuple[int, int | None]:
    """Recompute the audit trail's hash chain from the raw rows (``db.audit.row_hash``, the function Rosette
    hashes with): (rows, id of the first broken row or None)."""
    from db.audit import GENESIS, row_hash

    prev, n = GENESIS, 0
    for r in table_rows(engine, "audit_events"):
        n += 1
        expected = row_hash(prev, at=r["at"], user=r["user"], action=r["action"], target=r["target"],
                            details=r["details"])
        if r["prev_hash"] != prev or r["row_hash"] != expected:
            return n, r["id"]
        prev = r["row_hash"]
    return n, None


# --------------------------------------------------------------------------- migrating to a given revision


def upgrade_to_revision(url_or_engine: str | Engine, revision: str = OLD_REVISION) -> None:
    """Run the catalogue's Alembic migrations up to ``revision`` (not head) on any database, through the same
    ``db.session.upgrade_to_head`` the app migrates with."""
    from db.session import upgrade_to_head

    engine = create_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    try:
        upgrade_to_head(engine, revision=revision)
    finally:
        if isinstance(url_or_engine, str):
            engine.dispose()


def downgrade_to_revision(url_or_engine: str | Engine, revision: str) -> None:
    """Run the catalogue's Alembic migrations back down to ``revision``, as ``db.session.upgrade_to_head`` runs them
    up: in one transaction, and on SQLite with foreign keys off while batch migrations rebuild tables (and
    ``PRAGMA foreign_key_check`` empty before they are on again). A migration that refuses (its ``downgrade``
    raises) leaves the database as it was."""
    from alembic import command

    from db.session import alembic_config

    engine = create_engine(url_or_engine) if isinstance(url_or_engine, str) else url_or_engine
    sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.connect() as connection:
            if sqlite:
                connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
                connection.commit()
            try:
                with connection.begin():
                    cfg = alembic_config()
                    cfg.attributes["connection"] = connection
                    command.downgrade(cfg, revision)
                    if sqlite:
                        bad = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
                        if bad:
                            raise RuntimeError(f"going back left rows pointing nowhere: {bad[:5]}")
            finally:
                if sqlite:
                    connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                    connection.commit()
    finally:
        if isinstance(url_or_engine, str):
            engine.dispose()


# --------------------------------------------------------------------------- SQLite -> PostgreSQL at 0007 / 0008 / 0009


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    engine = create_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def load_old_catalogue_into_postgres(sqlite_path: str | os.PathLike[str], pg_url: str, *,
                                     revision: str = OLD_REVISION) -> dict[str, int]:
    """Make the catalogue of ``sqlite_path`` (a database at ``revision``, e.g. :data:`FIXTURE_DB` at 0007 or
    ``OLD_CATALOGUES["0008"].db``, read only) on the empty PostgreSQL database ``pg_url``: the schema by Alembic up
    to ``revision`` (``upgrade_to_revision``), then every row of every table with its own id, in one transaction,
    in foreign-key order (reusing ``db.catalogue_copy``: forward and self references such as
    ``species.active_model_id`` and ``individuals.merged_into_id`` written as NULL first and filled in once every
    row is there; JSON NULL stays SQL NULL); then each id sequence is moved past the largest id. The database is
    left at ``revision``. Returns the rows per table of the PostgreSQL database (as :func:`table_counts`)."""
    from db.catalogue_copy import _copy_tables, _empty, _reset_sequences, copy_order, deferred_columns

    with _engine(sqlite_url(sqlite_path, read_only=True)) as source, _engine(pg_url) as target:
        if target.dialect.name != "postgresql":
            raise ValueError(f"{target.url.render_as_string(hide_password=True)} is not a PostgreSQL database")
        have = revision_of(source)
        if have != revision:
            raise ValueError(f"{sqlite_path} is at schema {have}, not {revision}")
        busy = inspect(target).get_table_names()
        if busy:
            raise ValueError(f"the PostgreSQL database is not empty (tables: {', '.join(sorted(busy))})")
        upgrade_to_revision(target, revision)

        source_meta, target_meta = MetaData(), MetaData()
        source_meta.reflect(source)
        target_meta.reflect(target)
        names = set(source_meta.tables) - {"alembic_version"}
        if names != set(target_meta.tables) - {"alembic_version"}:
            raise ValueError(f"the tables differ: {sorted(names ^ (set(target_meta.tables) - {'alembic_version'}))}")
        for name in names:
            a, b = set(source_meta.tables[name].c.keys()), set(target_meta.tables[name].c.keys())
            if a != b:
                raise ValueError(f"table {name}: the columns differ ({sorted(a ^ b)})")

        shown = MetaData()
        for name in sorted(names):
            target_meta.tables[name].to_metadata(shown)
        order = copy_order(shown)  # each table after those it points to; the species <-> models cycle broken
        deferred = deferred_columns(order)
        tables = _copy_tables(order)  # JSON columns write Python None as SQL NULL
        with source.connect() as sconn, target.begin() as tconn:
            _empty(tconn, tables, deferred)  # the default species the migrations seed
            for t in tables:
                _copy_rows(sconn, tconn, source_meta.tables[t.name], t, deferred.get(t.name, []))
            for t in tables:
                if deferred.get(t.name):
                    _fill_later(sconn, tconn, source_meta.tables[t.name], t, deferred[t.name])
            _reset_sequences(tconn, tables)
        if revision_of(target) != revision:  # pragma: no cover - the upgrade above says otherwise
            raise RuntimeError("the PostgreSQL database is not at the old revision after loading")
        return table_counts(target)


def _copy_rows(sconn: Connection, tconn: Connection, source: Table, target: Table, later: list[str]) -> None:
    """Every row of ``source`` (read with SQLite's reflected types) into ``target`` (written with PostgreSQL's),
    the ``later`` columns as NULL."""
    rows = [dict(r._mapping) for r in sconn.execute(select(source).order_by(*source.primary_key.columns))]
    for r in rows:
        for c in later:
            r[c] = None
    if rows:
        tconn.execute(target.insert(), rows)


def _fill_later(sconn: Connection, tconn: Connection, source: Table, target: Table, columns: list[str]) -> None:
    """Write the forward and self references held back while copying."""
    pk = [c.name for c in target.primary_key.columns]
    query = select(*[source.c[c] for c in (*pk, *columns)]).order_by(*[source.c[c] for c in pk])
    rows = [{**{f"k_{c}": r._mapping[c] for c in pk}, **{f"v_{c}": r._mapping[c] for c in columns}}
            for r in sconn.execute(query) if any(r._mapping[c] is not None for c in columns)]
    if rows:
        statement = update(target).where(*[target.c[c] == bindparam(f"k_{c}") for c in pk]) \
            .values({c: bindparam(f"v_{c}") for c in columns})
        tconn.execute(statement, rows)


def pg_next_ids(engine: Engine) -> dict[str, int]:
    """Per table with a serial id, the id its sequence hands out next without taking it (``last_value`` and
    ``is_called``): one past the largest id when the sequences were reset."""
    out = {}
    with engine.connect() as conn:
        for name in inspect(conn).get_table_names():
            seq = conn.execute(text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": name}).scalar() \
                if "id" in {c["name"] for c in inspect(conn).get_columns(name)} else None
            if seq is None:
                continue
            last, called = conn.execute(text(f"SELECT last_value, is_called FROM {seq}")).one()
            out[name] = int(last) + 1 if called else int(last)
    return out


def max_ids(engine: Engine) -> dict[str, int]:
    """Per table with an ``id`` column, its largest id (0 when empty)."""
    out = {}
    with engine.connect() as conn:
        for name in inspect(conn).get_table_names():
            if "id" in {c["name"] for c in inspect(conn).get_columns(name)}:
                out[name] = int(conn.execute(text(f'SELECT coalesce(max(id), 0) FROM "{name}"')).scalar_one())
    return out


__all__ = ["CATALOGUE_0008_COUNTS", "CATALOGUE_0009_COUNTS", "FIXTURE_DB", "FIXTURE_DIR", "OLD_CATALOGUES",
           "OLD_CATALOGUE_COUNTS", "OLD_REVISION", "OldCatalogue", "audit_chain_holds", "copy_old_catalogue",
           "downgrade_to_revision", "load_old_catalogue_into_postgres", "max_ids", "old_catalogue", "pg_next_ids",
           "revision_of", "sqlite_url", "table_counts", "table_rows", "upgrade_to_revision"]
