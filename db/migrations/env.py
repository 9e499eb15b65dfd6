"""Alembic environment: uses the connection handed over by db.session.upgrade_to_head, or the URL given on the
command line (``alembic -x url=...``) or in alembic's config. The same migrations run on SQLite and PostgreSQL:
``render_as_batch`` rebuilds tables on SQLite only (elsewhere batch operations are plain ALTER TABLEs), JSON
columns are ``jsonb`` on PostgreSQL, and SQLite's PRAGMAs are set by db.session around the upgrade, on SQLite
only."""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from db.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    section = dict(config.get_section(config.config_ini_section) or {})
    url = context.get_x_argument(as_dictionary=True).get("url")
    if url:  # ``alembic -x url=postgresql+psycopg://...`` or ``-x url=sqlite:///...``
        section["sqlalchemy.url"] = url
    engine = engine_from_config(section, prefix="sqlalchemy.", poolclass=pool.NullPool)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()


run_migrations_online()
