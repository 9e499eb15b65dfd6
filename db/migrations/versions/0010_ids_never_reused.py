"""ids never reused: on SQLite, the tables whose rows can be deleted while their ids are named elsewhere get
AUTOINCREMENT, so a new row never takes the id of a deleted one

A plain ``INTEGER PRIMARY KEY`` on SQLite hands out max(id) + 1: delete the newest row and the next insert gets its
id, and whatever named the deleted row (the audit trail's ``photo#12``, a box edit, a report) silently names the new
one. AUTOINCREMENT keeps the largest id ever handed out in ``sqlite_sequence`` and never goes below it. The tables,
each with the delete that frees its ids and what names them:

- ``images`` (annotations): a curator's box delete and the undo of an added box (``db.records.annotations``); named by
  the audit trail (``photo#N``), ``box_edits.annotation_id`` (no foreign key: a deleted annotation is named too,
  and an undone delete brings it back under that id), feature caches and embedding sets, match decisions, reports;
- ``deployments``: a curator deletes one entered by mistake (``db.records.deployments.delete_deployment``); named by the
  audit trail (``deployment#N``);
- ``species``: a merge deletes the merged-away species and its undo brings it back under the same id
  (``db.species.merge_species``, ``db.catalogue._reverse_species_merge``); named by the merge's identity event and
  the audit trail (``species#N``);
- ``benchmarks``: rebuilding one (``replace``) deletes it and makes a new one; named by evaluations
  (``benchmark_name`` and id) and the audit trail (``benchmark#N``).

Rows of the other tables are never deleted (individuals merged away stay inactive; photos, box edits, decisions,
identity events, jobs, users and models stay for history), or have no id of their own (``match_suggestions``,
whose rows are derived and rebuilt), or are deleted only with their benchmark and named nowhere
(``benchmark_images``).

SQLite: each table is rebuilt with AUTOINCREMENT (a batch copy: columns, rows, foreign keys, indexes and unique
constraints as they were), and its ``sqlite_sequence`` entry starts at the largest id it ever used: its largest
id now, or a larger one that a deleted row had and that the audit trail (and, for annotations, the box edits)
still names. PostgreSQL's sequences never hand out an id twice; the tables stay as they are, and a sequence that is
behind such a deleted id (a catalogue copied from SQLite: its sequences restart after the largest id copied) is
moved past it. Going back rebuilds the tables without AUTOINCREMENT; no row changes either way.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 13:40:00
"""
import re

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

#: Each table, with the audit trail's label for its rows (``db.audit.AUDITED``: ``<label>#<id>``).
TABLES = {'images': 'photo', 'deployments': 'deployment', 'species': 'species', 'benchmarks': 'benchmark'}


def _largest_id_ever(conn: sa.Connection, table: str, label: str) -> int:
    """The largest id ``table`` ever handed out, as far as the catalogue still tells: its rows, the ids the audit
    trail names (a deleted row's too) and, for annotations, the ids the box edits name."""
    largest = conn.execute(sa.text(f'SELECT coalesce(max(id), 0) FROM "{table}"')).scalar_one()
    named = re.compile(re.escape(label) + r'#(\d+)')
    for (target,) in conn.execute(sa.text("SELECT DISTINCT target FROM audit_events WHERE target LIKE :p"),
                                  {"p": f"{label}#%"}):
        found = named.fullmatch(target or "")
        if found:
            largest = max(largest, int(found.group(1)))
    if table == 'images':
        edited = conn.execute(sa.text("SELECT coalesce(max(annotation_id), 0) FROM box_edits")).scalar_one()
        largest = max(largest, edited)
    return int(largest)


def _begin(conn: sa.Connection) -> None:
    """Open the SQLite transaction now. The driver opens one only before a write, and a rebuild starts with CREATE
    TABLE, which would otherwise be committed at once: a later failure, or a refusal by an older migration's
    downgrade in the same run, would leave a half-made copy of the table behind instead of rolling back."""
    if not conn.connection.dbapi_connection.in_transaction:
        conn.exec_driver_sql("BEGIN")


def _rebuild(table: str, *, autoincrement: bool) -> None:
    with op.batch_alter_table(table, recreate='always', table_kwargs={'sqlite_autoincrement': autoincrement}):
        pass


def upgrade() -> None:
    conn = op.get_bind()
    largest = {table: _largest_id_ever(conn, table, label) for table, label in TABLES.items()}
    if conn.dialect.name == 'sqlite':
        _begin(conn)
        for table in TABLES:
            _rebuild(table, autoincrement=True)
        for table, seq in largest.items():
            # the copy's explicit ids left the largest id now (or no entry, for an empty table); never below it
            conn.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = :t"), {"t": table})
            conn.execute(sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:t, :s)"), {"t": table, "s": seq})
    elif conn.dialect.name == 'postgresql':
        for table, seq in largest.items():
            name = conn.execute(sa.text("SELECT pg_get_serial_sequence(:t, 'id')"), {"t": table}).scalar()
            if name is None:
                continue
            last, called = conn.execute(sa.text(f"SELECT last_value, is_called FROM {name}")).one()
            if seq >= (last + 1 if called else last):  # the next id would be one a deleted row had
                conn.execute(sa.text("SELECT setval(:s, :v, true)"), {"s": name, "v": seq})


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name != 'sqlite':
        return
    _begin(conn)
    for table in TABLES:
        _rebuild(table, autoincrement=False)
    for table in TABLES:
        conn.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = :t"), {"t": table})
