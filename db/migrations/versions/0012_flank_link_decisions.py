"""flank_link_decisions: a curator's answer to a left-right flank link the two-flank density fit suggested

Additive: a new, empty table. A confirmed pair is merged (the merge's identity event is named, and undoing the
decision undoes it); a rejected pair stays here so the next partial-identity fit never links it. The partial unique
index keeps one standing answer per pair, so of two curators answering the same pair at once one is told.

Going back is refused while a rejected pair stands: the older schema cannot hold it, and the next fit would link the
pair again. Undo those answers first (``rosette flank-links undo``), or keep this version. Confirmed pairs are merges
the older schema keeps; their rows only say why the merge was made, and go with the table.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 23:30:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def _begin(conn: sa.Connection) -> None:
    """Open the SQLite transaction now: the driver opens one only before a write, so a CREATE TABLE would be
    committed at once, and a later migration's failure (or refusal) in the same run could not roll it back."""
    if conn.dialect.name == 'sqlite' and not conn.connection.dbapi_connection.in_transaction:
        conn.exec_driver_sql("BEGIN")


def upgrade() -> None:
    _begin(op.get_bind())
    op.create_table(
        'flank_link_decisions',
        sa.Column('id', sa.Integer(), primary_key=True),
        sa.Column('left_individual_id', sa.Integer(), sa.ForeignKey('individuals.id'), nullable=False),
        sa.Column('right_individual_id', sa.Integer(), sa.ForeignKey('individuals.id'), nullable=False),
        sa.Column('decision', sa.Enum('linked', 'rejected', name='flank_link_kind', native_enum=False, length=16),
                  nullable=False),
        sa.Column('probability', sa.Float(), nullable=True),
        sa.Column('job_id', sa.Integer(), sa.ForeignKey('jobs.id'), nullable=True),
        sa.Column('identity_event_id', sa.Integer(), sa.ForeignKey('identity_events.id'), nullable=True),
        sa.Column('user', sa.String(length=120), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('undone_at', sa.DateTime(), nullable=True),
    )
    op.create_index('ix_flank_link_decisions_right_individual_id', 'flank_link_decisions', ['right_individual_id'])
    op.create_index('ix_flank_link_decisions_standing', 'flank_link_decisions',
                    ['left_individual_id', 'right_individual_id'], unique=True,
                    sqlite_where=sa.text('undone_at IS NULL'), postgresql_where=sa.text('undone_at IS NULL'))


def downgrade() -> None:
    conn = op.get_bind()
    _begin(conn)
    standing = conn.execute(sa.text(
        "SELECT count(*) FROM flank_link_decisions WHERE decision = 'rejected' AND undone_at IS NULL")).scalar_one()
    if standing:
        pairs = "pair stands" if standing == 1 else "pairs stand"
        raise RuntimeError(f"{standing} rejected flank {pairs}; a catalogue before flank links cannot hold them, and "
                           "the next two-flank fit would link them again. Undo them first (rosette flank-links "
                           "undo LEFT RIGHT), or keep this version")
    op.drop_index('ix_flank_link_decisions_standing', table_name='flank_link_decisions')
    op.drop_index('ix_flank_link_decisions_right_individual_id', table_name='flank_link_decisions')
    op.drop_table('flank_link_decisions')
