"""Issue 20 on ``kloom up`` itself (real processes: the API, the supervised worker, its ranks; SQLite
and the filesystem broker in a data directory outside /tmp):

- a non-admin key's uploaded workload tries, at import and in ``forward``, every way the review
  found to become admin and more (read the admin key, the database, other users' uploads, the
  broker's queue; write the database, /etc and the data directory; reach PostgreSQL and Redis;
  read the worker's environment): every attempt fails, nothing changes, the key stays non-admin;
- a worker killed with SIGKILL is started again by ``kloom up``; meanwhile ``/health`` answers 503
  ``degraded``; the job it was running resumes and finishes.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import sqlite3
from pathlib import Path

import httpx
import pytest

from reliability_helpers import ROOT
from service_helpers import free_port, kloom_process, stop_process, wait_for
from untrusted_code import HONEST_WORKLOAD, WORKLOAD, allowed, source, verdicts

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="kloom up's worker runs ranks as another user only as root")]


class Embedded:
    def __init__(self, data: Path, log: Path):
        self.data = data
        self.log = log
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("KLOOM_")}
        env.update(KLOOM_WORKER_DEAD_AFTER_S="20", KLOOM_HEARTBEAT_INTERVAL_S="1", KLOOM_SWEEP_INTERVAL_S="2",
                   KLOOM_EVAL_CALL_TIMEOUT_S="20", KLOOM_EVAL_TIMING_BUDGET_S="0.1", KLOOM_EVAL_MIN_ITERS="3",
                   KLOOM_EVAL_MAX_ITERS="20", KLOOM_EVAL_WARMUP_ITERS="1", KLOOM_EVAL_TRIALS="2")
        self.proc = kloom_process(["up", "--data-dir", str(data), "--port", str(self.port)], env, log)
        self.base = f"http://127.0.0.1:{self.port}/api/v1"
        self.http = httpx.Client(timeout=10)

    def health(self) -> httpx.Response | None:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            return self.http.get(f"{self.base}/health")
        except httpx.TransportError:
            return None

    def workers(self, headers) -> list[dict]:
        return [w for w in self.http.get(f"{self.base}/workers", headers=headers).json()["data"] if w["alive"]]

    def job(self, job_id: str, headers) -> dict:
        return self.http.get(f"{self.base}/jobs/{job_id}", headers=headers).json()

    def finished(self, job_id: str, headers, timeout: float = 240) -> dict:
        return wait_for(lambda: (j := self.job(job_id, headers))["state"] in ("succeeded", "failed", "cancelled", "stopped") and j,
                        timeout, f"job {job_id} to finish", interval=0.5)

    def submit(self, headers, text: str, name: str, **fields) -> str:
        data = {"world_size": "2", "max_iters": "1", "device_kind": "cpu", **{k: str(v) for k, v in fields.items()}}
        r = self.http.post(f"{self.base}/jobs", data=data, files={"workload_file": (name, text.encode(), "text/x-python")}, headers=headers)
        assert r.status_code == 201, r.text
        return r.json()["id"]


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    # Outside /tmp (which ranks never see anyway): here the data directory is hidden on its own.
    data = ROOT / "build" / f"kloom-test-{secrets.token_hex(4)}"
    service = Embedded(data, tmp_path_factory.mktemp("embedded") / "up.log")
    try:
        up = wait_for(lambda: (r := service.health()) is not None and r.status_code == 200 and r.json()["workers_alive"] >= 1 and r,
                      120, "kloom up to answer with a live worker", interval=0.5)
        assert up.json()["status"] == "ok"
        service.admin = {"Authorization": f"Bearer {(data / 'admin_key').read_text().strip()}"}
        yield service
    finally:
        stop_process(service.proc)
        shutil.rmtree(data, ignore_errors=True)


def _key(service: Embedded, name: str) -> dict[str, str]:
    r = service.http.post(f"{service.base}/keys", json={"name": name}, headers=service.admin)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


def _files(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` but the database's (which the service itself writes), with its digest."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file() and not p.name.startswith("kloom.db")}


def test_an_uploaded_workload_cannot_reach_the_service(embedded):
    data = embedded.data
    # The service's files are its own: the data directory, the key and the database for root alone.
    assert oct(data.stat().st_mode & 0o777) == "0o700" and oct((data / "kloom.db").stat().st_mode & 0o777) == "0o600"
    alice, mallory = _key(embedded, "alice"), _key(embedded, "mallory")
    marker = f"ALICE-{secrets.token_hex(4)}"
    honest = embedded.submit(alice, HONEST_WORKLOAD + f"\nSECRET = {marker!r}\n", "alice.py")
    assert embedded.finished(honest, alice)["state"] == "succeeded"

    worker_pid = int(embedded.workers(embedded.admin)[0]["id"].split("-")[-2])
    before = _files(data)
    admin_key = (data / "admin_key").read_text()
    hostile = source(WORKLOAD, data=str(data), database=str(data / "kloom.db"), worker_pid=worker_pid)
    job = embedded.finished(embedded.submit(mallory, hostile, "hostile.py"), mallory)

    found = verdicts(job["stop_reason"])
    assert job["state"] == "failed" and not allowed(found), allowed(found)
    assert found["import"]["uid"] != 0 and found["forward"]["uid"] != 0
    # Nothing changed: no file, the admin key, every key's rights, /etc.
    assert _files(data) == before and (data / "admin_key").read_text() == admin_key
    with sqlite3.connect(data / "kloom.db") as db:
        assert db.execute("SELECT name FROM api_keys WHERE is_admin AND name IN ('alice', 'mallory')").fetchall() == []
    assert embedded.http.post(f"{embedded.base}/keys", json={"name": "escalated", "admin": True}, headers=mallory).status_code == 403
    assert not Path("/etc/kloom-pwned").exists()
    # Alice's upload is hers alone, and no answer to Mallory holds it.
    assert marker not in job["stop_reason"]
    assert embedded.http.get(f"{embedded.base}/jobs/{honest}/workload", headers=mallory).status_code == 404


def test_a_killed_worker_is_restarted_and_its_job_finishes(embedded):
    user = _key(embedded, "patient")
    # Three steps of the offline strategist on a suite workload: long enough to kill mid-job.
    r = embedded.http.post(f"{embedded.base}/jobs", data={"workload": "all_reduce_small", "world_size": "2", "max_iters": "3"}, headers=user)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    running = wait_for(lambda: (j := embedded.job(job_id, user))["state"] == "running" and j["worker_id"] and j, 120, "the job to start")
    victim = running["worker_id"]
    pid = int(victim.split("-")[-2])
    os.kill(pid, signal.SIGKILL)

    # No live worker serves the job's queue: degraded, 503, until the new worker is up.
    degraded = wait_for(lambda: (h := embedded.health()) is not None and h.status_code == 503 and h, 30, "/health to say degraded", interval=0.2)
    assert degraded.json()["status"] == "degraded" and degraded.json()["unserved_queues"] == {"cpu": 1}, degraded.json()
    wait_for(lambda: any(w["id"] != victim for w in embedded.workers(embedded.admin)), 90, "a new worker")

    done = embedded.finished(job_id, user, timeout=300)
    assert done["state"] == "succeeded" and done["attempts"] == 2 and done["worker_id"] != victim, done
    steps = embedded.http.get(f"{embedded.base}/jobs/{job_id}/steps", headers=user).json()["data"]
    assert [s["index"] for s in steps] == list(range(len(steps))), steps
    wait_for(lambda: (h := embedded.health()) is not None and h.status_code == 200, 30, "/health to be ok again")
    assert "died; started another" in embedded.log.read_text()
