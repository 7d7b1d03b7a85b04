"""Issue 20's attacks on the service's data, written as a candidate, with the static checker
switched off (it is a filter, not the defence), judged by the evaluator with the settings the
worker gives it (``tasks.rank_settings``): every attempt fails and nothing changes."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from kloom.settings import Settings
from reliability_helpers import EVAL_WORKLOADS
from services.worker import tasks
from services.worker.evaluator import Evaluator, evaluator as evaluator_module, sandbox
from untrusted_code import CANDIDATE, allowed, source, verdicts

pytestmark = pytest.mark.skipif(not sandbox.platform().root, reason="the worker runs ranks as another user only as root")


@pytest.fixture()
def service_data(tmp_path_factory):
    """A data directory as ``kloom up`` leaves it: an admin key, an SQLite database with a key."""
    data = Path(tmp_path_factory.mktemp("service")) / "data"
    settings = Settings(data_dir=data)
    data.mkdir()
    (data / "admin_key").write_text("kl_admin-CANDIDATE-77aa\n")
    with sqlite3.connect(settings.sqlite_path) as db:
        db.execute("CREATE TABLE api_keys (name TEXT, key_hash TEXT, is_admin BOOLEAN)")
        db.execute("INSERT INTO api_keys VALUES ('mallory', 'x', 0)")
    settings.make_private()
    return settings


def test_a_hostile_candidate_cannot_reach_the_service(service_data, tmp_path, monkeypatch):
    monkeypatch.setattr(evaluator_module, "check_candidate", lambda *a, **k: [])  # no static filter at all
    job_dir = tmp_path / "job"  # the worker's copy of the job's workload
    job_dir.mkdir()
    workload = job_dir / "linear_allreduce.py"
    workload.write_bytes((EVAL_WORKLOADS / "linear_allreduce.py").read_bytes())
    settings = tasks.rank_settings("cpu", service_data, "owner-of-the-job", str(job_dir))
    data = service_data.data_dir
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in data.iterdir()}
    candidate = source(CANDIDATE, data=str(data), database=str(service_data.sqlite_path), worker_pid=os.getpid())
    with Evaluator("cpu", settings) as evaluator:
        result = evaluator.evaluate(workload, candidate_source=candidate, world_size=2)
    assert result.status in ("compile_error", "runtime_error"), result.summary()
    found = verdicts(result.error.message)
    assert not allowed(found), allowed(found)
    assert found["import"]["uid"] != 0
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in data.iterdir()} == before
    with sqlite3.connect(service_data.sqlite_path) as db:
        assert db.execute("SELECT is_admin FROM api_keys").fetchall() == [(0,)]
    assert not Path("/etc/kloom-pwned").exists()
