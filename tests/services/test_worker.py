"""Workers: a real ``kloom worker`` process on the real Redis and PostgreSQL runs a job submitted
over HTTP with the offline strategist on the CPU; heartbeats register it; the sweep requeues a dead
worker's job, which resumes from its last recorded step; tasks are idempotent by job state."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from agents.records import JobSpec, Plan, Step, Trajectory
from kloom.clock import utcnow
from service_helpers import queue_length, submit, wait_for
from services.db import jobs as job_ops
from services.db.models import Job, Worker
from services.db.sink import DBSink
from services.worker.broker import dispatch
from services.worker.celery_app import create_celery_app
from services.worker.sweep import sweep
from services.worker.tasks import execute_job


def _events(client, headers, job_id: str) -> list[dict]:
    """Follows the job's event stream to its end (the job finishing)."""
    events = []
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events", headers=headers, timeout=240) as r:
        assert r.status_code == 200
        block: dict[str, str] = {}
        for line in r.iter_lines():
            if not line:
                if "id" in block:
                    events.append({"id": int(block["id"]), "event": block["event"], "data": json.loads(block["data"])})
                block = {}
            elif not line.startswith(":") and ": " in line:
                name, value = line.split(": ", 1)
                block[name] = value
    return events


def _dead_worker(sessions, name: str) -> None:
    with sessions() as s, s.begin():
        s.add(Worker(id=name, hostname="gone", pid=1, queues=["cpu"], gpus=[], profile="cpu", last_heartbeat=utcnow() - dt.timedelta(hours=1)))


def test_worker_registers_with_its_queues_and_gpus(client, worker, admin_headers):
    proc, log = worker

    def registered():
        assert proc.poll() is None, log.read_text()[-3000:]
        data = client.get("/api/v1/workers", headers=admin_headers).json()["data"]
        return [w for w in data if w["alive"] and w["queues"] == ["cpu"]]

    found = wait_for(registered, 60, "the worker's first heartbeat")[0]
    assert found["gpus"] == [] and found["profile"] == "cpu"
    first = found["last_heartbeat"]
    wait_for(lambda: registered()[0]["last_heartbeat"] != first, 10, "a second heartbeat")
    assert client.get("/api/v1/health").json()["workers_alive"] >= 1


@pytest.mark.slow
def test_job_submitted_over_http_runs_on_a_worker_and_streams_back(client, worker, new_key):
    pytest.importorskip("agents.loop")
    headers = new_key()
    r = submit(client, headers, world_size=2, max_iters=2, device_kind="cpu")
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    events = _events(client, headers, job_id)
    kinds = [e["event"] for e in events]
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert kinds[0] == "state" and events[0]["data"]["state"] == "queued"
    assert events[1]["data"]["state"] == "running" and events[1]["data"]["worker_id"].startswith("kloom-cpu-")
    step_events = [e for e in events if e["event"] == "step"]
    assert step_events and all(e["data"]["step"]["index"] == i for i, e in enumerate(step_events))
    assert events[-1]["event"] == "state" and events[-1]["data"]["state"] == "succeeded", events[-1]
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    assert job["num_steps"] == len(step_events) and job["attempts"] == 1 and job["best_speedup"] > 0
    best = client.get(f"/api/v1/jobs/{job_id}/best", headers=headers).json()
    assert "ModelNew" in best["code"] and best["step_index"] == job["best_step_index"]


def test_task_for_a_finished_job_does_nothing(client, new_key, sessions, settings):
    headers = new_key()
    job_id = submit(client, headers).json()["id"]
    client.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers)
    app = create_celery_app(settings)
    assert execute_job(app, job_id, worker_id="another") == "already cancelled"
    with sessions() as s:
        job = s.get(Job, job_id)
        assert job.state == "cancelled" and job.attempts == 0 and job.worker_id is None


def test_sweep_requeues_a_dead_workers_job_and_a_live_worker_resumes_it(client, worker, new_key, sessions, settings, redis_client):
    pytest.importorskip("agents.loop")
    headers = new_key()
    # Submitted to a queue nobody serves, so that only the worker that "dies" below takes it;
    # then moved to the live worker's queue, where the sweep's requeue will send it.
    job_id = submit(client, headers, world_size=2, max_iters=3, device_kind="cuda-h100x2").json()["id"]
    _dead_worker(sessions, "dead-1@gone")
    with sessions() as s, s.begin():
        s.get(Job, job_id).device_kind = "cpu"
    # A worker claims the job, records two steps, and dies (its heartbeat stops).
    with sessions() as s, s.begin():
        claim = job_ops.claim(s, job_id, "dead-1@gone", max_attempts=3, dead_after_s=settings.worker_dead_after_s)
    assert claim.action == "run"
    sink = DBSink(sessions, job_id, claim.attempt)
    traj = Trajectory(job=JobSpec(workload="w.py", world_size=2), state="running")
    for i in range(2):
        step = Step(index=i, plan=Plan(strategy="earlier_attempt"), status="incorrect", error="recorded before the worker died")
        traj.steps.append(step)
        sink.save(traj, step)

    celery = create_celery_app(settings)
    report = sweep(sessions, settings, lambda j, q: dispatch(celery, j, q))
    assert job_id in report.requeued
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    assert job["state"] in ("queued", "running") and "dead-1@gone stopped heartbeating" in job["stop_reason"]

    events = _events(client, headers, job_id)
    states = [e["data"]["state"] for e in events if e["event"] == "state"]
    assert states[:4] == ["queued", "running", "queued", "running"] and states[-1] in ("succeeded", "failed")
    steps = client.get(f"/api/v1/jobs/{job_id}/steps", headers=headers).json()
    assert [s["index"] for s in steps["data"]] == [0, 1, 2]  # resumed at step 2; nothing recorded twice
    assert steps["data"][0]["data"]["error"] == "recorded before the worker died"
    assert client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()["attempts"] == 2


def test_sweep_fails_a_job_after_too_many_attempts(client, new_key, sessions, settings, redis_client):
    headers = new_key()
    job_id = submit(client, headers, device_kind="cuda-h100x8").json()["id"]
    sent: list[tuple[str, str]] = []
    for attempt in range(1, settings.max_attempts + 1):
        name = f"dead-{attempt}-{job_id[:6]}@gone"
        _dead_worker(sessions, name)
        with sessions() as s, s.begin():
            assert job_ops.claim(s, job_id, name, max_attempts=settings.max_attempts, dead_after_s=60).action == "run"
        report = sweep(sessions, settings, lambda j, q: sent.append((j, q)))
        if attempt < settings.max_attempts:
            assert job_id in report.requeued and sent[-1] == (job_id, "cuda-h100x8")
    assert job_id in report.failed
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    assert job["state"] == "failed" and f"gave up after {settings.max_attempts} attempts" in job["stop_reason"]
    assert sum(1 for j, _ in sent if j == job_id) == settings.max_attempts - 1


@pytest.mark.slow
def test_cancel_stops_a_running_job_before_its_next_step(client, worker, new_key):
    pytest.importorskip("agents.loop")
    headers = new_key()
    job_id = submit(client, headers, world_size=2, max_iters=8, device_kind="cpu").json()["id"]

    def running():
        return client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()["state"] == "running"

    # Cancelled while the worker measures the reference (seconds), before the loop's first step.
    wait_for(running, 120, "the worker to take the job", interval=0.05)
    r = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=headers)
    assert r.status_code == 200 and r.json()["cancel_requested"], r.text
    events = _events(client, headers, job_id)
    assert events[-1]["data"]["state"] == "cancelled" and events[-1]["data"]["stop_reason"] == "cancelled by the user"
    assert "cancel" in [e["event"] for e in events]
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    assert job["state"] == "cancelled" and job["num_steps"] <= 1 and job["finished_at"]
