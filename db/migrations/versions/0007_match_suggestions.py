"""match_suggestions: each photo's stored best match under a model (the review queue of a large catalogue)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24 01:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'match_suggestions',
        sa.Column('image_id', sa.Integer(), sa.ForeignKey('images.id', ondelete='CASCADE'), primary_key=True),
        sa.Column('model_name', sa.String(length=200), primary_key=True),
        sa.Column('top_image_id', sa.Integer(), sa.ForeignKey('images.id', ondelete='SET NULL'), nullable=True),
        sa.Column('top_score', sa.Float(), nullable=False),
        sa.Column('computed_at', sa.DateTime(), nullable=False),
    )
    op.create_index('ix_match_suggestions_model_score', 'match_suggestions', ['model_name', 'top_score', 'image_id'])


def downgrade() -> None:
    op.drop_index('ix_match_suggestions_model_score', table_name='match_suggestions')
    op.drop_table('match_suggestions')
