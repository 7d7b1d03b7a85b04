"""Parts of the service die under load: a worker killed with SIGKILL in the middle of a job, and
the Redis broker restarted (losing every queued message) while jobs are queued and running. Real
``kloom worker`` processes, the real API app, PostgreSQL; nothing is lost or done twice."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agents.records import FINISHED_STATES
from reliability_helpers import EVAL_WORKLOADS, RedisServer, consistency_problems, start_worker
from service_helpers import TINY_WORKLOAD, stop_process, submit, wait_for
from tests.fakes.openai_server import FakeOpenAIServer, Reply

LLM_KEY = "sk-reliability-fake-" + os.urandom(8).hex()
CANDIDATE = (Path(__file__).resolve().parents[1] / "evaluator" / "candidates" / "correct.py").read_text()


def _answer(n: int) -> str:
    """An answer that reads as a plan (its JSON object) and as a candidate (its code block), so that
    a step redone after a worker died gets a usable answer whichever role asks. Each answer's code
    differs (a comment): the same code twice is recorded as skipped at once, without evaluating it,
    and a job of one evaluated step and two skipped ones could finish before the worker was killed."""
    return '{"strategy": "rewrite", "params": {}, "rationale": "scripted"}\n\n```python\n' + CANDIDATE + f"# variant {n}\n```\n"


@pytest.fixture(scope="module")
def fake_llm():
    """A scripted OpenAI-compatible model on loopback that answers ``_answer(n)`` to its n-th request."""
    with FakeOpenAIServer(api_key=LLM_KEY) as server:
        server.add(*[Reply.text(_answer(n), prompt_tokens=500, completion_tokens=200) for n in range(200)])
        yield server


def _llm_env(server: FakeOpenAIServer) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": LLM_KEY,
        "KLOOM_LLM_API_BASE": server.api_base,
        "KLOOM_LLM_TIMEOUT_S": "20",
        "KLOOM_LLM_MAX_RETRIES": "1",
        "KLOOM_LLM_BACKOFF_S": "0.1",
        "KLOOM_LLM_BACKOFF_MAX_S": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def _job(client, headers, job_id):
    return client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()


def _events(sessions, job_id):
    from sqlalchemy import select

    from services.db.models import JobEvent

    with sessions() as s:
        return [(e.kind, e.payload) for e in s.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.seq))]


@pytest.mark.slow
def test_a_worker_killed_mid_job_is_replaced_and_the_job_resumes_from_its_last_step(settings, sessions, run_id, tmp_path, fake_llm, record_property):
    from services.api.app import create_app

    s = settings.model_copy(update={"broker_key_prefix": f"kloomrel-{run_id}-kill:", "worker_dead_after_s": 5.0, "heartbeat_interval_s": 1.0})
    env = {**_llm_env(fake_llm), "KLOOM_SWEEP_INTERVAL_S": "1"}
    doomed = start_worker(s, tmp_path / "doomed.log", **env)
    spare = None
    try:
        with TestClient(create_app(s)) as client:
            headers = {"Authorization": f"Bearer {s.admin_key_value()}"}
            source = (EVAL_WORKLOADS / "linear_allreduce.py").read_text()
            r = submit(client, headers, source=source, filename="linear_allreduce.py", device_kind="cpu",
                       max_iters=3, strategist="openai/gpt-4o-mini", use_kb="false")
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            wait_for(lambda: _job(client, headers, job_id)["state"] == "running", 120, "the first worker to take the job")
            # Only now a second worker: the job is the first one's.
            spare = start_worker(s, tmp_path / "spare.log", sweep=True, **env)

            def a_step():
                assert doomed.poll() is None, (tmp_path / "doomed.log").read_text()[-3000:]
                return _job(client, headers, job_id)["num_steps"] >= 1

            wait_for(a_step, 240, "a recorded step")
            ranks = _rank_pids(doomed.pid)
            assert ranks, "the first worker's warm pool"
            os.killpg(doomed.pid, signal.SIGKILL)  # the worker, its child and nothing else: as a machine dies
            killed_at = time.monotonic()
            doomed.wait(10)
            before = client.get(f"/api/v1/jobs/{job_id}/steps", headers=headers).json()["data"]  # all it recorded
            # Its ranks die with the process that owned their pool.
            wait_for(lambda: not [pid for pid in ranks if _alive(pid)], 20, "the dead worker's ranks to exit")

            job = wait_for(lambda: _done(client, headers, job_id), 300, "the job to finish on the other worker")
            recovered_s = time.monotonic() - killed_at
        assert job["state"] == "succeeded", job
        assert job["attempts"] == 2
        steps = client.get(f"/api/v1/jobs/{job_id}/steps", headers=headers).json()["data"]
        assert [st["index"] for st in steps] == list(range(3)), "every step recorded once"
        assert [st["data"] for st in steps[: len(before)]] == [st["data"] for st in before], "recorded steps kept as they were"
        states = [p["state"] for kind, p in _events(sessions, job_id) if kind == "state"]
        assert states == ["queued", "running", "queued", "running", "succeeded"], states
        requeue = [p for kind, p in _events(sessions, job_id) if kind == "state" and p["state"] == "queued"][1]
        assert "stopped heartbeating" in requeue["stop_reason"] and f"resuming from step {len(before)}" in requeue["stop_reason"]
        assert consistency_problems(sessions, [job_id]) == []
        record_property("killed_after_steps", len(before))
        record_property("seconds_from_kill_to_finish", round(recovered_s, 1))
    finally:
        for proc in (doomed, spare):
            if proc is not None:
                stop_process(proc)


@pytest.mark.slow
def test_redis_restarted_with_jobs_queued_and_running_loses_no_job(settings, sessions, tmp_path):
    from services.api.app import create_app

    redis = RedisServer(tmp_path)
    redis.start()
    worker = None
    try:
        s = settings.model_copy(update={"broker_url": redis.url, "broker_key_prefix": ""})
        worker = start_worker(s, tmp_path / "worker.log", sweep=True, KLOOM_SWEEP_INTERVAL_S="1", KLOOM_REDISPATCH_AFTER_S="5")
        with TestClient(create_app(s)) as client:
            headers = {"Authorization": f"Bearer {s.admin_key_value()}"}
            first, queued = (submit(client, headers, device_kind="cpu", world_size=1, use_kb="false").json()["id"] for _ in range(2))
            wait_for(lambda: _job(client, headers, first)["state"] == "running", 120, "the worker to take the first job")
            assert _job(client, headers, queued)["state"] == "queued"

            redis.stop()  # every queued message is gone with it (no persistence)
            r = submit(client, headers, device_kind="cpu", world_size=1)
            assert r.status_code == 503 and "job queue is unavailable" in r.json()["detail"]
            health = client.get("/api/v1/health")
            assert health.status_code == 503 and not health.json()["broker"]["ok"]
            redis.start()

            # The API reconnects by itself: a new submission is queued at once.
            after = wait_for(lambda: _submitted(client, headers), 30, "the API to queue again")
            jobs = [first, queued, after]
            done = wait_for(lambda: all(_job(client, headers, j)["state"] in FINISHED_STATES for j in jobs) and jobs, 400, "every job to finish")
        results = {j: _job_row(sessions, j) for j in done}
        assert all(r["state"] == "succeeded" and r["attempts"] == 1 for r in results.values()), results
        assert consistency_problems(sessions, jobs) == []
        assert worker.poll() is None, "the worker survived the broker's restart"
    finally:
        if worker is not None:
            stop_process(worker)
        redis.stop()


def _submitted(client, headers):
    r = submit(client, headers, device_kind="cpu", world_size=1, use_kb="false")
    return r.json()["id"] if r.status_code == 201 else None


def _done(client, headers, job_id):
    job = _job(client, headers, job_id)
    return job if job["state"] in FINISHED_STATES else None


def _job_row(sessions, job_id):
    from services.db.models import Job

    with sessions() as s:
        job = s.get(Job, job_id)
        return {"state": job.state, "attempts": job.attempts, "stop_reason": job.stop_reason}


def _rank_pids(worker_group: int) -> list[int]:
    """Rank processes (exec'd, or forked from the worker's fork server, and their launchers)
    descended from a process in ``worker_group`` (the worker's child that runs jobs)."""
    def parent(pid: int) -> int:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                if b"services.worker.evaluator.rank_main" not in cmdline and b"services.worker.evaluator.fork_server" not in cmdline:
                    continue
                ancestor = parent(int(entry))
                for _ in range(4):  # its launcher, the fork server, the worker's child
                    if ancestor <= 1:
                        break
                    if os.getpgid(ancestor) == worker_group:
                        found.append(int(entry))
                        break
                    ancestor = parent(ancestor)
            except (OSError, ValueError):
                continue
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
