"""Revision 0002 creates exactly the tables ``kb.models`` describes, on both backends, and
downgrades cleanly to the service tables alone."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

import kb.models  # noqa: F401  (registers the knowledge-base tables on Base.metadata)
from kloom.db import Base, create_db_engine, current_revision, upgrade

KB_TABLES = {"kb_workloads", "kb_jobs", "kb_kernels", "kb_strategies", "kb_evidence", "kb_failures"}


def kb_diffs(url: str) -> list:
    def kb_only(obj, _name, type_, _reflected, _compare_to) -> bool:
        table = obj if type_ == "table" else getattr(obj, "table", None)
        return table is None or table.name in KB_TABLES

    engine = create_db_engine(url, pool=False)
    try:
        with engine.connect() as conn:
            return compare_metadata(MigrationContext.configure(conn, opts={"include_object": kb_only}), Base.metadata)
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = create_db_engine(url, pool=False)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_revision_0002_matches_the_models_and_downgrades(kb_db):
    kb_db.engine.dispose()
    assert KB_TABLES <= tables(kb_db.url)
    assert kb_diffs(kb_db.url) == []

    from alembic import command

    from kloom.db import alembic_config

    command.downgrade(alembic_config(kb_db.url), "0001")
    assert current_revision(kb_db.url) == "0001"
    left = tables(kb_db.url)
    assert not KB_TABLES & left and {"jobs", "steps", "api_keys"} <= left

    upgrade(kb_db.url, "0002")
    assert current_revision(kb_db.url) == "0002" and kb_diffs(kb_db.url) == []
