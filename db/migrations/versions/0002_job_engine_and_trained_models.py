"""job engine (queues, attempts, child pid) and trained models (loss, data snapshot, training job)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 17:30:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

# JSON, stored as jsonb on PostgreSQL (as db.models.JSONType)
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), 'postgresql')


def upgrade() -> None:
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue', sa.String(length=16), nullable=False, server_default='light'))
        batch_op.add_column(sa.Column('pid', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('attempts', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('max_attempts', sa.Integer(), nullable=False, server_default='2'))
        batch_op.create_index(batch_op.f('ix_jobs_queue'), ['queue'], unique=False)
    # jobs that existed before the queues: training-like kinds go to the heavy queue
    op.execute("UPDATE jobs SET queue = 'heavy' WHERE kind IN ('train', 'evaluate', 'diagnose')")
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.add_column(sa.Column('loss', sa.String(length=100), nullable=True))
        batch_op.add_column(sa.Column('data_snapshot', JSON_TYPE, nullable=True))
        batch_op.add_column(sa.Column('job_id', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_models_job_id_jobs', 'jobs', ['job_id'], ['id'])


def downgrade() -> None:
    with op.batch_alter_table('models', schema=None) as batch_op:
        batch_op.drop_constraint('fk_models_job_id_jobs', type_='foreignkey')
        batch_op.drop_column('job_id')
        batch_op.drop_column('data_snapshot')
        batch_op.drop_column('loss')
    with op.batch_alter_table('jobs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_jobs_queue'))
        batch_op.drop_column('max_attempts')
        batch_op.drop_column('attempts')
        batch_op.drop_column('pid')
        batch_op.drop_column('queue')
