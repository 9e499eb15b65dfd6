"""annotations: a photo holds zero or more animals, each an annotation with its own box (docs/DESIGN.md section 8)

Every existing photo becomes one photo row (same id, same file columns) and its ``images`` row becomes that
photo's one whole-photo annotation (box 0, 0, 1, 1, source "whole-photo"): every id stays, so decisions,
identity events, audit rows, benchmarks, evaluations, stored matches and trained models' training sets keep
pointing at the same animal. Two annotations of one photo share its bytes, so ``images.content_hash`` is no
longer unique (``photos.content_hash`` is).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-25 06:20:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql')
_FILE_COLUMNS = ('content_hash', 'original_name', 'blob_path', 'thumb_path', 'format', 'mode', 'width', 'height',
                 'size_bytes', 'exif_time', 'gps_lat', 'gps_lon', 'sighting_id', 'imported_at')


def upgrade() -> None:
    op.create_table('photos',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('original_name', sa.String(length=500), nullable=False),
    sa.Column('blob_path', sa.String(length=300), nullable=False),
    sa.Column('thumb_path', sa.String(length=300), nullable=True),
    sa.Column('format', sa.String(length=16), nullable=False),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('width', sa.Integer(), nullable=False),
    sa.Column('height', sa.Integer(), nullable=False),
    sa.Column('size_bytes', sa.Integer(), nullable=False),
    sa.Column('exif_time', sa.String(length=40), nullable=True),
    sa.Column('gps_lat', sa.Float(), nullable=True),
    sa.Column('gps_lon', sa.Float(), nullable=True),
    sa.Column('sighting_id', sa.Integer(), nullable=True),
    sa.Column('people', _JSON, nullable=True),
    sa.Column('detections', _JSON, nullable=True),
    sa.Column('imported_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['sighting_id'], ['sightings.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('photos', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_photos_content_hash'), ['content_hash'], unique=True)
        batch_op.create_index(batch_op.f('ix_photos_sighting_id'), ['sighting_id'], unique=False)
    op.create_table('box_edits',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('photo_id', sa.Integer(), nullable=False),
    sa.Column('annotation_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('before', _JSON, nullable=True),
    sa.Column('after', _JSON, nullable=True),
    sa.Column('user', sa.String(length=120), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('undone_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['photo_id'], ['photos.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('box_edits', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_box_edits_photo_id'), ['photo_id'], unique=False)
    cols = ', '.join(_FILE_COLUMNS)
    op.execute(f"INSERT INTO photos (id, {cols}) SELECT id, {cols} FROM images")
    if op.get_bind().dialect.name == 'postgresql':  # explicit ids leave the serial's sequence behind them
        op.execute("SELECT setval(pg_get_serial_sequence('photos', 'id'), "
                   "COALESCE((SELECT max(id) FROM photos), 0) + 1, false)")
    with op.batch_alter_table('images', schema=None) as batch_op:
        batch_op.add_column(sa.Column('photo_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('bbox_x', sa.Float(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('bbox_y', sa.Float(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('bbox_w', sa.Float(), nullable=False, server_default='1'))
        batch_op.add_column(sa.Column('bbox_h', sa.Float(), nullable=False, server_default='1'))
        batch_op.add_column(sa.Column('box_source', sa.String(length=80), nullable=False,
                                      server_default='whole-photo'))
        batch_op.add_column(sa.Column('box_confidence', sa.Float(), nullable=True))
    op.execute("UPDATE images SET photo_id = id")
    with op.batch_alter_table('images', schema=None) as batch_op:
        batch_op.alter_column('photo_id', existing_type=sa.Integer(), nullable=False)
        batch_op.create_index(batch_op.f('ix_images_photo_id'), ['photo_id'], unique=False)
        batch_op.create_foreign_key('fk_images_photo_id', 'photos', ['photo_id'], ['id'])
        batch_op.drop_index(batch_op.f('ix_images_content_hash'))
        batch_op.create_index(batch_op.f('ix_images_content_hash'), ['content_hash'], unique=False)


def downgrade() -> None:
    extra = op.get_bind().execute(sa.text("SELECT count(*) FROM images WHERE box_source != 'whole-photo'")).scalar()
    if extra:
        raise RuntimeError(f"{extra} annotation(s) are boxes inside a photo; a catalogue before annotations "
                           "cannot hold them (delete them first, or keep this version)")
    with op.batch_alter_table('images', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_images_content_hash'))
        batch_op.create_index(batch_op.f('ix_images_content_hash'), ['content_hash'], unique=True)
        batch_op.drop_constraint('fk_images_photo_id', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_images_photo_id'))
        for col in ('box_confidence', 'box_source', 'bbox_h', 'bbox_w', 'bbox_y', 'bbox_x', 'photo_id'):
            batch_op.drop_column(col)
    with op.batch_alter_table('box_edits', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_box_edits_photo_id'))
    op.drop_table('box_edits')
    with op.batch_alter_table('photos', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_photos_sighting_id'))
        batch_op.drop_index(batch_op.f('ix_photos_content_hash'))
    op.drop_table('photos')
