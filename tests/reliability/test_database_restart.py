"""PostgreSQL restarted under a running service: a cluster of the test's own (initdb + pg_ctl on a
free loopback port) is stopped while a real worker runs a job and clients call the API. The API
answers 503 with a message meanwhile and recovers without a restart; the worker's run waits for
the database and finishes; nothing is half-written."""

from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient

from kloom.db import create_db_engine, session_factory, upgrade
from reliability_helpers import PostgresCluster, consistency_problems, start_worker, table_counts
from service_helpers import TINY_WORKLOAD, stop_process, submit, wait_for

pytestmark = pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser to run initdb as postgres")


@pytest.mark.slow
def test_api_answers_503_while_postgres_is_down_and_the_job_survives_the_restart(settings, run_id, tmp_path):
    from services.api.app import create_app

    cluster = PostgresCluster()
    cluster.init()
    cluster.start()
    worker = None
    try:
        url = cluster.create_database("kloom")
        upgrade(url)
        s = settings.model_copy(update={"database_url": url, "broker_key_prefix": f"kloomrel-{run_id}-pg:", "data_dir": tmp_path})
        sessions = session_factory(create_db_engine(url))
        worker_log = tmp_path / "worker.log"
        worker = start_worker(s, worker_log)
        with TestClient(create_app(s)) as client:
            headers = {"Authorization": f"Bearer {s.admin_key_value()}"}
            job_id = submit(client, headers, device_kind="cpu", max_iters=4).json()["id"]

            def running():
                assert worker.poll() is None, worker_log.read_text()[-3000:]
                return client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()["state"] == "running"

            # Stopped while the worker times the reference: the loop saves the baseline next.
            wait_for(running, 120, "the worker to take the job", interval=0.05)
            before = table_counts(sessions)
            cluster.stop()
            try:
                for call in (
                    lambda: client.get(f"/api/v1/jobs/{job_id}", headers=headers),
                    lambda: client.get("/api/v1/jobs", headers=headers),
                    lambda: client.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers),
                    lambda: submit(client, headers, source=TINY_WORKLOAD, device_kind="cpu"),
                ):
                    r = call()
                    assert r.status_code == 503 and "database is unavailable" in r.json()["detail"], r.text
                    assert r.headers["retry-after"] == "5"
                health = client.get("/api/v1/health")
                assert health.status_code == 503 and not health.json()["database"]["ok"]
                assert "the database does not answer" in health.json()["database"]["error"]
                # Down until the worker's run has had to wait for it (its next save or cancel check).
                wait_for(lambda: "the database is unreachable" in worker_log.read_text(), 180, "the run to meet the outage")
            finally:
                cluster.start()

            # The same API process answers again, and the job goes on where it was.
            wait_for(lambda: client.get(f"/api/v1/jobs/{job_id}", headers=headers).status_code == 200, 30, "the API to recover")
            assert client.get("/api/v1/health").status_code == 200
            job = wait_for(lambda: _finished(client, headers, job_id), 240, "the job to finish")
        assert job["state"] == "succeeded" and job["attempts"] == 1, job
        after = table_counts(sessions)
        assert after["jobs"] == before["jobs"], "the submission refused during the outage left a row"
        assert after["steps"] == job["num_steps"] >= before["steps"]
        assert consistency_problems(sessions) == []
    finally:
        if worker is not None:
            stop_process(worker)
        cluster.remove()


def _finished(client, headers, job_id):
    r = client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    if r.status_code == 200 and r.json()["state"] not in ("queued", "running"):
        return r.json()
    return None
