"""Copying a whole catalogue into another database: SQLite to PostgreSQL and back (``rosette catalogue copy``).

The target is migrated to the newest schema first (so its ``alembic_version`` is at head), then every table of
``db.models`` is copied in foreign-key order, every row with its own id, in batches (never a whole table in
memory). Foreign keys that point forward (species -> its active model) or into the same table (an individual
merged into a later one) are written as NULL first and filled in once every row is there. Each table's id
sequence (PostgreSQL's, SQLite's ``sqlite_sequence``) is then moved past the largest id copied, or past the
largest id the source ever handed out where a deleted row had a larger one: no id is given twice on either side.
The source is read in one transaction (one consistent snapshot) and the target written in one (a failed copy
leaves it as it was).

Afterwards the rows of each table are counted on both sides and the target's audit chain is verified. The photo
files are not copied: they stay in the content-addressed store of the data directory, which both databases share.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import JSON, Connection, Engine, MetaData, Table, bindparam, func, insert, select, text, update
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.schema import sort_tables_and_constraints

from db.audit import ChainCheck, verify_chain
from db.models import Base
from db.session import Catalogue, display_url, open_catalogue, sqlite_file

BATCH_ROWS = 5000
#: The one row a freshly migrated catalogue holds (migration 0003): it does not make a target "not empty".
SEED_SPECIES = (1, "default")


class TargetNotEmptyError(ValueError):
    """The target database already holds a catalogue (and ``force`` was not given)."""


@dataclass(frozen=True)
class TableCount:
    table: str
    source_rows: int
    target_rows: int

    @property
    def ok(self) -> bool:
        return self.source_rows == self.target_rows


@dataclass(frozen=True)
class CopyReport:
    source: str  # URLs as shown (password hidden)
    target: str
    tables: tuple[TableCount, ...]
    audit: ChainCheck
    seconds: float
    data_dir: str  # where the photo files stay

    @property
    def ok(self) -> bool:
        return self.audit.ok and all(t.ok for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.target_rows for t in self.tables)


def copy_order(metadata: MetaData = Base.metadata) -> list[Table]:
    """The catalogue's tables, each after the tables it points to (cycles broken by :func:`deferred_columns`)."""
    return [t for t, _ in sort_tables_and_constraints(metadata.tables.values()) if t is not None]


def deferred_columns(order: list[Table]) -> dict[str, list[str]]:
    """Per table, the foreign-key columns that point to the same table or one copied later: written as NULL
    with the row, filled in after every table is copied."""
    position = {t.name: i for i, t in enumerate(order)}
    out: dict[str, list[str]] = {}
    for i, t in enumerate(order):
        for fk in t.foreign_keys:
            if position.get(fk.column.table.name, -1) >= i:
                out.setdefault(t.name, []).append(fk.parent.name)
    return {k: sorted(set(v)) for k, v in out.items()}


def _copy_tables(order: list[Table]) -> list[Table]:
    """The tables as copied: JSON columns write Python None as SQL NULL (the source's NULL stays NULL)."""
    meta = MetaData()
    tables = [t.to_metadata(meta) for t in order]
    for t in tables:
        for c in t.columns:
            if isinstance(c.type, JSON):
                c.type = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
    return tables


def _counts(conn: Connection, tables: list[Table]) -> dict[str, int]:
    return {t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one()) for t in tables}


def _only_seed(conn: Connection, counts: dict[str, int]) -> bool:
    """The target holds nothing but what migrating an empty database writes (the default species)."""
    busy = {name: n for name, n in counts.items() if n}
    if not busy:
        return True
    if busy != {"species": 1}:
        return False
    row = conn.execute(text("SELECT id, name FROM species")).first()
    return row is not None and (int(row[0]), str(row[1])) == SEED_SPECIES


def _empty(conn: Connection, tables: list[Table], deferred: dict[str, list[str]]) -> None:
    """Delete every row of the target's tables (forward and self references cleared first)."""
    by_name = {t.name: t for t in tables}
    for name, columns in deferred.items():
        conn.execute(update(by_name[name]).values({c: None for c in columns}))
    for t in reversed(tables):
        conn.execute(t.delete())


def _batches(conn: Connection, table: Table, batch_rows: int) -> Iterator[list[dict[str, Any]]]:
    query = select(table).order_by(*table.primary_key.columns)
    result = conn.execution_options(yield_per=batch_rows).execute(query)
    for part in result.partitions(batch_rows):
        yield [dict(r._mapping) for r in part]


def _serial_id(t: Table) -> str | None:
    """The name of ``t``'s serial id column (a single integer primary key), or None."""
    pk = list(t.primary_key.columns)
    if len(pk) != 1 or not pk[0].autoincrement or pk[0].type.python_type is not int:
        return None
    return pk[0].name


def _largest_ids_ever(conn: Connection, tables: list[Table]) -> dict[str, int]:
    """Per table, the largest id the database ever handed out, which a row deleted since may have had: SQLite's
    ``sqlite_sequence`` (its tables with AUTOINCREMENT), PostgreSQL's id sequences. Copied along, so the target
    never gives such an id to a new row either."""
    if conn.dialect.name == "sqlite":
        if conn.execute(text("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'")).first() is None:
            return {}
        return {str(name): int(seq) for name, seq in conn.execute(text("SELECT name, seq FROM sqlite_sequence"))}
    out = {}
    for t in tables:
        column = _serial_id(t)
        sequence = column and conn.execute(text("SELECT pg_get_serial_sequence(:t, :c)"),
                                           {"t": t.name, "c": column}).scalar()
        if sequence:
            last, called = conn.execute(text(f"SELECT last_value, is_called FROM {sequence}")).one()
            out[t.name] = int(last) if called else int(last) - 1
    return out


def _reset_sequences(conn: Connection, tables: list[Table], *, largest_ever: dict[str, int] | None = None) -> None:
    """Each serial id continues after the largest id copied, or after the largest id the source ever handed out
    (``largest_ever``) where that is larger: PostgreSQL's sequences, and on SQLite the ``sqlite_sequence`` entries
    of the tables with AUTOINCREMENT."""
    largest_ever = largest_ever or {}
    sqlite = conn.dialect.name == "sqlite"
    for t in tables:
        column = _serial_id(t)
        if column is None:
            continue
        at_least = largest_ever.get(t.name, 0)
        if sqlite:  # the copy's explicit ids moved the entry to the largest one copied already
            conn.execute(text("UPDATE sqlite_sequence SET seq = :v WHERE name = :t AND seq < :v"),
                         {"t": t.name, "v": at_least})
            continue
        conn.execute(text(f'SELECT setval(pg_get_serial_sequence(:t, :c), '
                          f'greatest(coalesce(max("{column}"), 0), :v, 1), max("{column}") IS NOT NULL OR :v > 0) '
                          f'FROM "{t.name}"'),
                     {"t": t.name, "c": column, "v": at_least})


def _same_database(source: Catalogue, target_url: str) -> bool:
    a, b = sqlite_file(source.url), sqlite_file(target_url)
    if a is not None and b is not None:
        return a.expanduser().resolve() == b.expanduser().resolve()
    return display_url(source.url) == display_url(target_url)


def copy_catalogue(source: Catalogue, target_url: str, *, force: bool = False, batch_rows: int = BATCH_ROWS,
                   progress: Callable[[str, int], None] | None = None) -> CopyReport:
    """Copy every row of ``source`` into the database at ``target_url`` (migrated to head first), keeping ids;
    then count each table on both sides and verify the target's audit chain. A target holding any row is refused
    (:class:`TargetNotEmptyError`, naming the table) unless ``force``, which empties it first. ``progress`` is
    called with (table, rows copied so far)."""
    t0 = time.perf_counter()
    if _same_database(source, target_url):
        raise ValueError(f"the target {display_url(target_url)} is the catalogue being copied; choose another one")
    target = open_catalogue(source.data_dir, url=target_url)  # migrates it to head; a clear error if unreachable
    try:
        order = copy_order()
        tables = _copy_tables(order)
        deferred = deferred_columns(order)
        with _source_connection(source.engine) as sconn, target.engine.begin() as tconn:
            _check_revisions(sconn, tconn, target_url)
            counts = _counts(tconn, tables)
            if not force and not _only_seed(tconn, counts):
                busy = [(t.name, counts[t.name]) for t in tables if counts[t.name]]
                name, n = next(((k, v) for k, v in busy if k != "species"), busy[0])  # the default species is
                # in every migrated catalogue: name a table that says more
                raise TargetNotEmptyError(
                    f"the target {display_url(target_url)} is not empty: table {name} holds {n:,} "
                    f"row{'' if n == 1 else 's'}; "
                    "copy into an empty database, or give --force to replace everything in it")
            _empty(tconn, tables, deferred)
            source_counts = _counts(sconn, tables)
            largest_ever = _largest_ids_ever(sconn, tables)
            for t in tables:
                _copy_table(sconn, tconn, t, deferred.get(t.name, []), batch_rows, progress)
            for t in tables:
                if deferred.get(t.name):
                    _fill_deferred(sconn, tconn, t, deferred[t.name], batch_rows)
            _reset_sequences(tconn, tables, largest_ever=largest_ever)
        with target.engine.connect() as tconn:
            target_counts = _counts(tconn, tables)
        audit = verify_chain(target)
        return CopyReport(source=display_url(source.url), target=display_url(target_url),
                          tables=tuple(TableCount(t.name, source_counts[t.name], target_counts[t.name])
                                       for t in tables),
                          audit=audit, seconds=time.perf_counter() - t0, data_dir=str(source.data_dir))
    finally:
        target.close()


@contextmanager
def _source_connection(engine: Engine) -> Iterator[Connection]:
    """One read transaction on the source (PostgreSQL: repeatable read, one snapshot for every table)."""
    options = {"isolation_level": "REPEATABLE READ"} if engine.dialect.name == "postgresql" else {}
    with engine.connect().execution_options(**options) as conn:
        conn.begin()
        try:
            yield conn
        finally:
            conn.rollback()  # read only: nothing to keep


def _check_revisions(sconn: Connection, tconn: Connection, target_url: str) -> None:
    read = "SELECT version_num FROM alembic_version"
    have, want = tconn.execute(text(read)).scalar(), sconn.execute(text(read)).scalar()
    if have != want:
        raise ValueError(f"the target {display_url(target_url)} is at schema {have} and the source at {want}; "
                         "open the source once with this Rosette to bring it up to date")


def _copy_table(sconn: Connection, tconn: Connection, table: Table, later: list[str], batch_rows: int,
                progress: Callable[[str, int], None] | None) -> None:
    done = 0
    statement = insert(table)
    for rows in _batches(sconn, table, batch_rows):
        if later:
            for r in rows:
                for c in later:
                    r[c] = None
        tconn.execute(statement, rows)
        done += len(rows)
        if progress is not None:
            progress(table.name, done)


def _fill_deferred(sconn: Connection, tconn: Connection, table: Table, columns: list[str], batch_rows: int) -> None:
    """Write the forward and self references held back while copying ``table``."""
    pk = list(table.primary_key.columns)
    wanted = [*pk, *(table.c[c] for c in columns)]
    query = select(*wanted).order_by(*pk)
    statement = update(table).where(*[c == bindparam(f"k_{c.name}") for c in pk]) \
        .values({c: bindparam(f"v_{c}") for c in columns})
    result = sconn.execution_options(yield_per=batch_rows).execute(query)
    for part in result.partitions(batch_rows):
        rows = [{**{f"k_{c.name}": r._mapping[c.name] for c in pk}, **{f"v_{c}": r._mapping[c] for c in columns}}
                for r in part if any(r._mapping[c] is not None for c in columns)]
        if rows:
            tconn.execute(statement, rows)
