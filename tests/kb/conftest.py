"""Knowledge-base databases for the tests: a SQLite file, and a PostgreSQL database of its own on
the local server (created per test and dropped after, so that tests of other parts that share the
``test`` database are never disturbed). Both get their schema from Alembic."""

from __future__ import annotations

import pytest
from tests.kb.kb_databases import KBDatabase, create_pg_database, drop_pg_database, pg_url

from kloom.db import create_db_engine, session_factory, upgrade


@pytest.fixture(scope="session")
def pg_template():
    """A migrated database that each test's database is copied from (faster than migrating each)."""
    name = create_pg_database()
    upgrade(pg_url(name))
    yield name
    drop_pg_database(name)


@pytest.fixture
def pg_db(pg_template):
    name = create_pg_database(template=pg_template)
    url = pg_url(name)
    engine = create_db_engine(url)
    try:
        yield KBDatabase(url, engine, session_factory(engine), name)
    finally:
        engine.dispose()
        drop_pg_database(name)


@pytest.fixture
def sqlite_db(tmp_path):
    url = f"sqlite:///{tmp_path / 'kb.db'}"
    upgrade(url)
    engine = create_db_engine(url)
    yield KBDatabase(url, engine, session_factory(engine))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def kb_db(request):
    """The same test on both databases the knowledge base runs on."""
    return request.getfixturevalue("sqlite_db" if request.param == "sqlite" else "pg_db")
