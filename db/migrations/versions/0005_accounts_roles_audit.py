"""users.role / password_hash / active / updated_at, and the hash-chained audit_events table

Names already in ``users`` (recorded with past changes) keep no password: they cannot sign in until an admin
sets one (``rosette users passwd``). They become viewers.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 19:40:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

# JSON, stored as jsonb on PostgreSQL (as db.models.JSONType)
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')


def upgrade() -> None:
    with op.batch_alter_table('users', schema=None) as batch_op:
        batch_op.add_column(sa.Column('role', sa.Enum('viewer', 'curator', 'admin', name='user_role',
                                                      native_enum=False, length=16),
                                      nullable=False, server_default='viewer'))
        batch_op.add_column(sa.Column('password_hash', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('active', sa.Boolean(), nullable=False, server_default='1'))
        batch_op.add_column(sa.Column('updated_at', sa.DateTime(), nullable=True))
    op.create_table(
        'audit_events',
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('at', sa.DateTime(), nullable=False),
        sa.Column('user', sa.String(length=120), nullable=False),
        sa.Column('action', sa.String(length=80), nullable=False),
        sa.Column('target', sa.String(length=120), nullable=False),
        sa.Column('details', JSON_TYPE, nullable=False),
        sa.Column('prev_hash', sa.String(length=64), nullable=False),
        sa.Column('row_hash', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('row_hash'),
    )
    for column in ('at', 'user', 'action', 'target'):
        op.create_index(f'ix_audit_events_{column}', 'audit_events', [column])


def downgrade() -> None:
    op.drop_table('audit_events')
    with op.batch_alter_table('users', schema=None) as batch_op:
        for column in ('updated_at', 'active', 'password_hash', 'role'):
            batch_op.drop_column(column)
