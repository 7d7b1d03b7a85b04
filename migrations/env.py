"""Alembic environment: one history for the service tables and the knowledge-base tables.

The URL comes from the config's ``url`` attribute (``kloom.db.upgrade``), else
``sqlalchemy.url`` in alembic.ini, else ``KLOOM_DATABASE_URL`` through ``kloom.settings``.
"""

from __future__ import annotations

import importlib

from alembic import context

import services.db.models  # noqa: F401  (registers the service tables on Base.metadata)
from kloom.db import Base, create_db_engine

try:
    importlib.import_module("kb.models")  # the knowledge-base tables, where that package has them
except ImportError:
    pass

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if url:
        return url
    from kloom.settings import Settings

    return Settings().db_url


def run_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    engine = create_db_engine(_url(), pool=False)
    try:
        with engine.connect() as connection:
            # Batch mode lets later revisions alter tables on SQLite, which has no ALTER COLUMN.
            context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
