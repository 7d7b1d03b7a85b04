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
    assert current_revision(kb_db.url) == "0002" and KB_TABLES <= tables(kb_db.url)
    upgrade(kb_db.url)
    assert kb_diffs(kb_db.url) == []


def test_revision_0003_gives_kept_kernels_the_first_evaluator_version(kb_db):
    """Kernels kept before evaluations carried a version were judged by the evaluator whose
    candidate shared the reference's process: they come out of the migration as version 1,
    not yet verified, so that ``kloom kb verify`` judges them again."""
    from alembic import command
    from sqlalchemy import text

    from kloom.db import alembic_config

    kb_db.engine.dispose()
    command.downgrade(alembic_config(kb_db.url), "0002")
    engine = create_db_engine(kb_db.url, pool=False)
    try:
        with engine.begin() as conn:
            conn.execute(text(
                "INSERT INTO kb_jobs (job_id, workload_sha256, workload_name, family, world_size, device, gpu, interconnect,"
                " signature, state, stop_reason, strategist, steps, finished_at, ingested_at)"
                " VALUES ('old-job', 'abc', 'w', 'f', 2, 'cpu', '', '', '{}', 'succeeded', '', 'offline', 1, '', CURRENT_TIMESTAMP)"
            ))
            conn.execute(text(
                "INSERT INTO kb_kernels (job_id, step_index, code, code_sha256, workload_sha256, workload_name, family, collectives,"
                " world_size, device, gpu, interconnect, signature, speedup, candidate_ms, reference_ms, evaluation, strategy, params,"
                " plan_source, rationale, model, created_at)"
                " VALUES ('old-job', 0, 'code', 'sha', 'abc', 'w', 'f', ' ', 2, 'cpu', '', '', '{}', 1.5, 1.0, 1.5, '{}', 's', '{}',"
                " '', '', '', CURRENT_TIMESTAMP)"
            ))
        upgrade(kb_db.url)
        with engine.connect() as conn:
            assert conn.execute(text("SELECT evaluator_version, verified_at FROM kb_kernels")).all() == [("1", None)]
            # Revision 0004: no autotuning choices were kept with it.
            assert conn.execute(text("SELECT tuned FROM kb_kernels")).scalar() in ("[]", [])
    finally:
        engine.dispose()
