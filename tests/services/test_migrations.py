"""Migrations: a database made by the first revision, with data in it, upgrades to head and keeps
its data; the service tables at head are exactly what the models say (PostgreSQL and SQLite)."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from agents.records import FINISHED_STATES
from kloom.db import Base, create_db_engine, current_revision, upgrade
from service_helpers import drop_database, new_database
from services.db.models import ApiKey, Job, JobEvent, StepRecord

SERVICE_TABLES = {"api_keys", "batches", "jobs", "steps", "job_events", "workers"}


@pytest.fixture(params=["postgresql", "sqlite"])
def empty_db(request, pg_url, tmp_path):
    """An empty database of each backend the service runs on."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'kloom.db'}"
        return
    name = f"kloom_migr_{uuid.uuid4().hex[:10]}"
    yield new_database(name)
    drop_database(name)


def _service_diffs(url: str) -> list:
    """What differs between the service models and the database's service tables."""

    def service_only(obj, _name, type_, _reflected, _compare_to) -> bool:
        table = obj if type_ == "table" else getattr(obj, "table", None)
        return table is None or table.name in SERVICE_TABLES

    only_service = {"include_object": service_only}
    engine = create_db_engine(url, pool=False)
    try:
        with engine.connect() as conn:
            return compare_metadata(MigrationContext.configure(conn, opts=only_service), Base.metadata)
    finally:
        engine.dispose()


def test_a_first_revision_database_upgrades_to_head_with_its_data(empty_db):
    upgrade(empty_db, "0001")
    assert current_revision(empty_db) == "0001"
    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    engine = create_db_engine(empty_db, pool=False)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO api_keys (id, name, key_hash, prefix, is_admin, created_at) VALUES ('k1', 'old', :h, 'kl_old', false, :t)"),
            {"h": "0" * 64, "t": now},
        )
        conn.execute(
            text(
                "INSERT INTO jobs (id, owner_key_id, workload_name, workload_family, workload_source, workload_sha256, world_size,"
                " device_kind, strategist, limits, options, state, stop_reason, attempts, cancel_requested, num_steps, event_seq,"
                " created_at, updated_at) VALUES ('j1', 'k1', 'w', 'collectives', 'src', :sha, 2, 'cpu', 'offline',"
                " '{\"max_iters\": 3}', '{}', 'succeeded', 'done', 1, false, 1, 1, :t, :t)"
            ),
            {"sha": "a" * 64, "t": now},
        )
        conn.execute(
            text("INSERT INTO steps (job_id, \"index\", status, speedup, data, created_at) VALUES ('j1', 0, 'correct', 1.5, '{\"index\": 0}', :t)"),
            {"t": now},
        )
        conn.execute(text("INSERT INTO job_events (job_id, seq, kind, payload, created_at) VALUES ('j1', 1, 'state', '{}', :t)"), {"t": now})
    engine.dispose()

    upgrade(empty_db)  # to head: 0001 and whatever revisions follow it
    assert current_revision(empty_db) == _heads()[0]
    engine = create_db_engine(empty_db, pool=False)
    with Session(engine) as s:
        job = s.get(Job, "j1")
        assert job.state in FINISHED_STATES and job.limits == {"max_iters": 3} and job.created_at == now
        assert s.get(ApiKey, "k1").name == "old"
        assert s.query(StepRecord).filter_by(job_id="j1").one().speedup == 1.5
        assert s.query(JobEvent).filter_by(job_id="j1").count() == 1
    assert SERVICE_TABLES <= set(inspect(engine).get_table_names())
    engine.dispose()
    assert _service_diffs(empty_db) == []


def _heads() -> list[str]:
    from alembic.script import ScriptDirectory

    from kloom.db import alembic_config

    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_heads()


def test_one_history_with_the_first_revision_at_its_root():
    from alembic.script import ScriptDirectory

    from kloom.db import alembic_config

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1, "the service and knowledge-base revisions must form one line"
    assert [r.revision for r in script.walk_revisions()][-1] == "0001"
