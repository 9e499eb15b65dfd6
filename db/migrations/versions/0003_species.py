"""species: every individual and photo belongs to one; benchmarks, models and the active model per species

Existing catalogues migrate to one default species (id 1, named "default"; rename it with
`rosette species rename`). The model that was active becomes that species' active model.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 17:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('species',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=120), nullable=False),
    sa.Column('active_model_id', sa.Integer(), nullable=True),
    sa.Column('new_individual_threshold', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['active_model_id'], ['models.id'], name='fk_species_active_model'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.execute("INSERT INTO species (id, name, created_at) VALUES (1, 'default', CURRENT_TIMESTAMP)")
    if op.get_bind().dialect.name == 'postgresql':  # an explicit id leaves the serial's sequence behind it
        op.execute("SELECT setval(pg_get_serial_sequence('species', 'id'), (SELECT max(id) FROM species))")
    op.execute("UPDATE species SET active_model_id = (SELECT id FROM models WHERE status = 'active' "
               "ORDER BY id LIMIT 1) WHERE id = 1")
    for table in ('individuals', 'images'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('species_id', sa.Integer(), nullable=False, server_default='1'))
            batch_op.create_index(batch_op.f(f'ix_{table}_species_id'), ['species_id'], unique=False)
            batch_op.create_foreign_key(f'fk_{table}_species_id', 'species', ['species_id'], ['id'])
    for table in ('benchmarks', 'models'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.add_column(sa.Column('species_id', sa.Integer(), nullable=True))
            batch_op.create_foreign_key(f'fk_{table}_species_id', 'species', ['species_id'], ['id'])
    op.execute("UPDATE benchmarks SET species_id = 1")


def downgrade() -> None:
    for table in ('benchmarks', 'models'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(f'fk_{table}_species_id', type_='foreignkey')
            batch_op.drop_column('species_id')
    for table in ('individuals', 'images'):
        with op.batch_alter_table(table, schema=None) as batch_op:
            batch_op.drop_constraint(f'fk_{table}_species_id', type_='foreignkey')
            batch_op.drop_index(batch_op.f(f'ix_{table}_species_id'))
            batch_op.drop_column('species_id')
    op.drop_table('species')
