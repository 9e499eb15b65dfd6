"""deployments: camera stations with their active periods, photos' deployment and time, events, Camtrap DP ids,
an individual's sex and life stage (docs/DESIGN.md section 8)

Only adds: a new table and nullable columns, so every existing row keeps its values. A catalogue made before
has no deployments; its photos keep their sightings as they were.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25 09:40:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')


def upgrade() -> None:
    op.create_table('deployments',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('location_id', sa.String(length=200), nullable=True),
    sa.Column('location_name', sa.String(length=200), nullable=True),
    sa.Column('lat', sa.Float(), nullable=True),
    sa.Column('lon', sa.Float(), nullable=True),
    sa.Column('start', sa.String(length=40), nullable=False),
    sa.Column('end', sa.String(length=40), nullable=False),
    sa.Column('camera_id', sa.String(length=200), nullable=True),
    sa.Column('camera_model', sa.String(length=200), nullable=True),
    sa.Column('details', _JSON, nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_deployments')),
    sa.UniqueConstraint('key', name=op.f('uq_deployments_key'))
    )
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_deployments_location_id'), ['location_id'], unique=False)

    with op.batch_alter_table('individuals', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sex', sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column('life_stage', sa.String(length=20), nullable=True))

    with op.batch_alter_table('sightings', schema=None) as batch_op:
        batch_op.add_column(sa.Column('deployment_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('event_key', sa.String(length=200), nullable=True))
        batch_op.create_index(batch_op.f('ix_sightings_deployment_id'), ['deployment_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_sightings_deployment_id_deployments'), 'deployments',
                                    ['deployment_id'], ['id'])

    with op.batch_alter_table('photos', schema=None) as batch_op:
        batch_op.add_column(sa.Column('deployment_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('taken_at', sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column('media_key', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('media_details', _JSON, nullable=True))
        batch_op.create_index(batch_op.f('ix_photos_deployment_id'), ['deployment_id'], unique=False)
        batch_op.create_unique_constraint(batch_op.f('uq_photos_media_key'), ['media_key'])
        batch_op.create_foreign_key(batch_op.f('fk_photos_deployment_id_deployments'), 'deployments',
                                    ['deployment_id'], ['id'])

    with op.batch_alter_table('images', schema=None) as batch_op:
        batch_op.add_column(sa.Column('observation_key', sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column('life_stage', sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column('sex', sa.String(length=20), nullable=True))
        batch_op.add_column(sa.Column('observation_details', _JSON, nullable=True))
        batch_op.create_unique_constraint(batch_op.f('uq_images_observation_key'), ['observation_key'])


def downgrade() -> None:
    used = op.get_bind().execute(sa.text("SELECT count(*) FROM deployments")).scalar()
    if used:
        raise RuntimeError(f"{used} deployment(s) are in the catalogue; a catalogue before deployments cannot hold "
                           "them (export them as Camtrap DP first, or keep this version)")
    with op.batch_alter_table('images', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('uq_images_observation_key'), type_='unique')
        for col in ('observation_details', 'sex', 'life_stage', 'observation_key'):
            batch_op.drop_column(col)
    with op.batch_alter_table('photos', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_photos_deployment_id_deployments'), type_='foreignkey')
        batch_op.drop_constraint(batch_op.f('uq_photos_media_key'), type_='unique')
        batch_op.drop_index(batch_op.f('ix_photos_deployment_id'))
        for col in ('media_details', 'media_key', 'taken_at', 'deployment_id'):
            batch_op.drop_column(col)
    with op.batch_alter_table('sightings', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_sightings_deployment_id_deployments'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_sightings_deployment_id'))
        for col in ('event_key', 'deployment_id'):
            batch_op.drop_column(col)
    with op.batch_alter_table('individuals', schema=None) as batch_op:
        for col in ('life_stage', 'sex'):
            batch_op.drop_column(col)
    with op.batch_alter_table('deployments', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_deployments_location_id'))
    op.drop_table('deployments')
