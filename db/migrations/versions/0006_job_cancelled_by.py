"""jobs.cancelled_by: who asked a job to stop (the Jobs tab and `rosette jobs` say so, not "the curator")

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 16:25:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('cancelled_by', sa.String(length=120), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_column('cancelled_by')
