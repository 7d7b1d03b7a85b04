"""``kloom up``: API, worker and migrations in one command, on SQLite and the filesystem broker,
with no PostgreSQL and no Redis configured; a job runs there from submission to best kernel."""

from __future__ import annotations

import os
import sqlite3

import httpx
import pytest

from service_helpers import free_port, kloom_process, stop_process, wait_for


@pytest.mark.slow
def test_kloom_up_runs_a_job_on_embedded_defaults(tmp_path):
    pytest.importorskip("agents.loop")
    port = free_port()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KLOOM_")}
    proc = kloom_process(["up", "--data-dir", str(data), "--port", str(port)], env, tmp_path / "up.log")
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy():
            assert proc.poll() is None, (tmp_path / "up.log").read_text()[-3000:]
            try:
                r = httpx.get(f"{base}/api/v1/health", timeout=2)
            except httpx.TransportError:
                return None
            return r.json() if r.status_code == 200 and r.json()["workers_alive"] >= 1 else None

        health = wait_for(healthy, 90, "kloom up to answer with a live worker", interval=0.5)
        assert health["database"]["ok"] and health["broker"]["ok"]
        key_file = data / "admin_key"
        assert oct(key_file.stat().st_mode & 0o777) == "0o600"
        headers = {"Authorization": f"Bearer {key_file.read_text().strip()}"}
        r = httpx.post(f"{base}/api/v1/jobs", data={"workload": "all_reduce_small", "world_size": "2", "max_iters": "1"}, headers=headers)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        with httpx.stream("GET", f"{base}/api/v1/jobs/{job_id}/events", headers=headers, timeout=240) as stream:
            last = [line for line in stream.iter_lines() if line.startswith("data: ")][-1]
        assert '"state": "succeeded"' in last, last
        best = httpx.get(f"{base}/api/v1/jobs/{job_id}/best", headers=headers).json()
        assert "ModelNew" in best["code"]
        # Everything lives in the data directory: the SQLite file at the migrations' head, and the broker's folders.
        with sqlite3.connect(data / "kloom.db") as db:
            assert db.execute("SELECT count(*) FROM jobs").fetchone() == (1,)
            assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0]
        assert (data / "broker" / "queue").is_dir()
    finally:
        stop_process(proc)
