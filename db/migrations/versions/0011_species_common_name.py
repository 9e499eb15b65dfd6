"""species.common_name: what the people who know a species call it, beside its scientific name (``name``)

Additive: a nullable column, empty for every species already there. The Species tab and ``rosette species`` set it;
the Camtrap DP export writes it as the taxon's English vernacular name, and the import reads it back.

The column is added and dropped in place (ALTER TABLE on both databases, no table rebuild), so SQLite's
AUTOINCREMENT on ``species`` and its ``sqlite_sequence`` entry (revision 0010) stay as they are. Going back is
refused while any species has a common name: the older schema cannot hold it, and dropping it would lose what
curators entered. Clear them first (``rosette species common-name SPECIES ""``), or keep this version.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 14:20:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def _begin(conn: sa.Connection) -> None:
    """Open the SQLite transaction now: the driver opens one only before a write, so an ALTER TABLE would be
    committed at once, and a later migration's failure (or refusal) in the same run could not roll it back."""
    if conn.dialect.name == 'sqlite' and not conn.connection.dbapi_connection.in_transaction:
        conn.exec_driver_sql("BEGIN")


def upgrade() -> None:
    _begin(op.get_bind())
    op.add_column('species', sa.Column('common_name', sa.String(length=200), nullable=True))


def downgrade() -> None:
    conn = op.get_bind()
    _begin(conn)
    named = conn.execute(sa.text(
        "SELECT name FROM species WHERE common_name IS NOT NULL AND common_name <> '' ORDER BY id")).scalars().all()
    if named:
        shown = ", ".join(named[:5]) + (f" and {len(named) - 5} more" if len(named) > 5 else "")
        verb = "has" if len(named) == 1 else "have"
        raise RuntimeError(f"{len(named)} species {verb} a common name ({shown}); a catalogue before common names "
                           "cannot hold them. Clear them first (rosette species common-name SPECIES \"\"), or keep "
                           "this version")
    op.drop_column('species', 'common_name')
