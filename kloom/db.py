"""SQLAlchemy 2 ``Base``, engine and session factories, and Alembic upgrades run from code.

Nothing here is created at import time: the API, the worker, the CLI and the tests each build the
engine they need from a URL, so that a test can point everything at its own database.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from sqlalchemy import JSON, DateTime, Engine, MetaData, create_engine, event
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.pool import NullPool
from sqlalchemy.types import TypeDecorator

import migrations

#: Constraint names that Alembic can find again on every database.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: JSON on SQLite, JSONB on PostgreSQL.
JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    """Declarative base of every table (service and knowledge base share one metadata)."""

    metadata = MetaData(naming_convention=NAMING)


class UTCDateTime(TypeDecorator):
    """A timezone-aware UTC timestamp on every backend (SQLite returns naive values)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(dt.timezone.utc)

    def process_result_value(self, value, dialect):
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        return value


def create_db_engine(url: str, *, pool: bool = True) -> Engine:
    """An engine for ``url``: SQLite in WAL mode with write transactions that take the lock up
    front (several processes write the embedded database), PostgreSQL with connection checks so
    that the service recovers by itself after a database restart."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, poolclass=NullPool)
        _sqlite_pragmas(engine)
        return engine
    options = dict(pool_pre_ping=True, pool_size=10, max_overflow=20, pool_timeout=10, pool_recycle=1800)
    if url.startswith("postgresql"):
        options["connect_args"] = {"connect_timeout": 5}
    return create_engine(url, **options) if pool else create_engine(url, poolclass=NullPool)


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # Let SQLAlchemy, not the sqlite3 module, decide when transactions begin.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        # A deferred transaction that later writes can fail at once with "database is locked";
        # taking the write lock at BEGIN makes it wait its turn instead.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose objects stay readable after commit (routes return them)."""
    return sessionmaker(engine, expire_on_commit=False)


def migrations_dir() -> Path:
    # __path__, not __file__: an editable install may map the package as a namespace.
    return Path(next(iter(migrations.__path__))).resolve()


def alembic_config(url: str):
    """An Alembic config for ``url`` pointing at kloom's migrations, without reading alembic.ini."""
    from alembic.config import Config  # lazy: alembic (~0.1 s) only where migrations run, not in every process with a database

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # Passed as an attribute, not an ini option, so that '%' in passwords needs no escaping.
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` (the service runs this at start; never ``create_all``)."""
    from alembic import command  # lazy: alembic (~0.1 s) only where migrations run, not in every process with a database

    command.upgrade(alembic_config(url), revision)


def current_revision(url: str) -> str | None:
    """The revision the database is at (None for an empty database)."""
    from alembic.runtime.migration import MigrationContext  # lazy: alembic (~0.1 s) only where migrations run, not in every process with a database

    engine = create_db_engine(url, pool=False)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
