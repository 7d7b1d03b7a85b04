"""Jobs over HTTP against the real PostgreSQL and Redis: submit, list, get, cancel, steps, best
kernel, the event stream and idempotent submission. Steps are recorded here through ``DBSink``,
exactly as the worker's task records them."""

from __future__ import annotations

import json

import pytest

from agents.records import JobSpec, Plan, Step, Trajectory
from service_helpers import IDLE_QUEUE, TINY_WORKLOAD, queue_length, submit
from services.db import jobs as job_ops
from services.db.models import Job
from services.db.sink import DBSink, LeaseLost
from tests import eval_records


def _step(index: int, ms: float | None, code: str = "class ModelNew: pass") -> Step:
    status = "correct" if ms is not None else "incorrect"
    evaluation = eval_records.evaluation(timing=eval_records.timing(2.0 / ms, ms), roofline=eval_records.roofline(fraction_of_floor=0.1 * index)) if ms else None
    return Step(index=index, plan=Plan(strategy=f"s{index}"), status=status, candidate_code=code, candidate_sha256=f"sha{index}", evaluation=evaluation)


def _run_steps(sessions, job_id: str, timings: list[float | None], final: str | None = None) -> Trajectory:
    """Claim the job as a worker would and save steps through the sink."""
    with sessions() as s, s.begin():
        claim = job_ops.claim(s, job_id, "test-worker", max_attempts=3, dead_after_s=60)
    assert claim.action == "run"
    sink = DBSink(sessions, job_id, claim.attempt)
    traj = Trajectory(job=JobSpec(workload="w.py", world_size=2), state="running")
    for i, ms in enumerate(timings):
        step = _step(i, ms, code=f"# kernel {i}")
        traj.steps.append(step)
        sink.save(traj, step)
    if final:
        traj.state, traj.stop_reason = final, "done"
        sink.save(traj, None)
    return traj


def _sse(text: str) -> list[dict]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "id" in fields:
            events.append({"id": int(fields["id"]), "event": fields["event"], "data": json.loads(fields["data"])})
    return events


def test_submit_upload_records_the_job_and_queues_its_task(client, new_key, redis_client, settings):
    headers = new_key()
    before = queue_length(redis_client, settings, IDLE_QUEUE)
    r = submit(client, headers, world_size=2, max_iters=3, budget_usd=0.5)
    assert r.status_code == 201, r.text
    job = r.json()
    assert job["state"] == "queued" and job["workload_name"] == "tiny" and job["world_size"] == 2
    assert job["limits"] == {"max_iters": 3, "max_wall_s": None, "max_tokens": None, "budget_usd": 0.5}
    assert queue_length(redis_client, settings, IDLE_QUEUE) == before + 1
    got = client.get(f"/api/v1/jobs/{job['id']}", headers=headers).json()
    assert got["id"] == job["id"] and got["workload_sha256"] == job["workload_sha256"]
    source = client.get(f"/api/v1/jobs/{job['id']}/workload", headers=headers).json()
    assert source["source"] == TINY_WORKLOAD


def test_submit_by_suite_name(client, new_key):
    headers = new_key()
    r = client.post("/api/v1/jobs", data={"workload": "all_reduce_small", "world_size": "4", "device_kind": "cuda-h200x4"}, headers=headers)
    assert r.status_code == 201, r.text
    assert r.json()["workload_family"] == "collectives" and r.json()["device_kind"] == "cuda-h200x4"


def test_the_profile_choice_reaches_the_jobs_spec(client, new_key, sessions):
    """What the worker runs is ``job_spec`` of the row: the submission's profile choice (default
    new_best), not an option the loop would never read."""
    headers = new_key()
    chosen = submit(client, headers, world_size=2, profile="none").json()
    default = submit(client, headers, world_size=2).json()
    with sessions() as s:
        specs = {job_id: job_ops.job_spec(s.get(Job, job_id), "w.py") for job_id in (chosen["id"], default["id"])}
    assert specs[chosen["id"]].profile == "none" and "profile" not in specs[chosen["id"]].options
    assert specs[default["id"]].profile == "new_best"
    assert (chosen["profile"], default["profile"], chosen["use_kb"]) == ("none", "new_best", True)


def test_list_filters_by_state_and_pages(client, new_key):
    headers = new_key()
    ids = [submit(client, headers).json()["id"] for _ in range(5)]
    client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=headers)
    page = client.get("/api/v1/jobs?limit=2&offset=0", headers=headers).json()
    assert page["count"] == 5 and len(page["data"]) == 2
    rest = client.get("/api/v1/jobs?limit=10&offset=2", headers=headers).json()
    assert {j["id"] for j in page["data"] + rest["data"]} == set(ids)
    queued = client.get("/api/v1/jobs?state=queued", headers=headers).json()
    assert queued["count"] == 4 and ids[0] not in {j["id"] for j in queued["data"]}
    cancelled = client.get("/api/v1/jobs?state=cancelled", headers=headers).json()
    assert [j["id"] for j in cancelled["data"]] == [ids[0]]


def test_cancel_queued_job_at_once_and_running_job_at_next_step(client, new_key, sessions):
    headers = new_key()
    queued = submit(client, headers).json()["id"]
    r = client.post(f"/api/v1/jobs/{queued}/cancel", headers=headers)
    assert r.json()["state"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{queued}/cancel", headers=headers)
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]

    running = submit(client, headers).json()["id"]
    _run_steps(sessions, running, [1.0])
    r = client.post(f"/api/v1/jobs/{running}/cancel", headers=headers)
    assert r.status_code == 200 and r.json()["state"] == "running" and r.json()["cancel_requested"]
    sink = DBSink(sessions, running, attempt=1)
    assert sink.cancel_requested()
    # The loop stops at its next step and saves the final state; the best kernel stays.
    traj = Trajectory(job=JobSpec(workload="w.py", world_size=2), steps=[_step(0, 1.0)], state="cancelled", stop_reason="cancelled by the user")
    sink.save(traj, None)
    job = client.get(f"/api/v1/jobs/{running}", headers=headers).json()
    assert job["state"] == "cancelled" and job["best_step_index"] == 0
    assert client.get(f"/api/v1/jobs/{running}/best", headers=headers).status_code == 200


def test_steps_after_and_best_kernel(client, new_key, sessions):
    headers = new_key()
    job_id = submit(client, headers).json()["id"]
    assert client.get(f"/api/v1/jobs/{job_id}/best", headers=headers).status_code == 404
    _run_steps(sessions, job_id, [4.0, None, 0.5, 1.0], final="succeeded")
    steps = client.get(f"/api/v1/jobs/{job_id}/steps", headers=headers).json()
    assert steps["count"] == 4 and [s["index"] for s in steps["data"]] == [0, 1, 2, 3]
    later = client.get(f"/api/v1/jobs/{job_id}/steps?after=1", headers=headers).json()
    assert [s["index"] for s in later["data"]] == [2, 3]
    assert later["data"][0]["data"]["plan"]["strategy"] == "s2"
    best = client.get(f"/api/v1/jobs/{job_id}/best", headers=headers).json()
    assert best["step_index"] == 2 and best["code"] == "# kernel 2" and best["speedup"] == 4.0
    job = client.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    assert job["state"] == "succeeded" and job["num_steps"] == 4 and job["best_speedup"] == 4.0
    assert job["finished_at"] is not None


def test_a_step_saved_twice_is_recorded_once(client, new_key, sessions):
    headers = new_key()
    job_id = submit(client, headers).json()["id"]
    traj = _run_steps(sessions, job_id, [2.0])
    sink = DBSink(sessions, job_id, attempt=1)
    sink.save(traj, traj.steps[0])  # a redelivered task saving the same step again
    traj.state = "succeeded"
    sink.save(traj, None)
    assert client.get(f"/api/v1/jobs/{job_id}/steps", headers=headers).json()["count"] == 1
    events = _sse(client.get(f"/api/v1/jobs/{job_id}/events", headers=headers).text)
    assert [e["event"] for e in events].count("step") == 1


def test_a_run_that_lost_its_job_cannot_write(client, new_key, sessions):
    headers = new_key()
    job_id = submit(client, headers).json()["id"]
    traj = _run_steps(sessions, job_id, [2.0])
    with sessions() as s, s.begin():  # the sweep gave the job to another worker
        job_ops.requeue(s, s.get(job_ops.Job, job_id), "worker test-worker stopped heartbeating")
    stale = DBSink(sessions, job_id, attempt=1)
    assert stale.cancel_requested()
    traj.steps.append(_step(1, 0.1))
    with pytest.raises(LeaseLost):
        stale.save(traj, traj.steps[1])
    assert client.get(f"/api/v1/jobs/{job_id}/steps", headers=headers).json()["count"] == 1


def test_event_stream_resumes_from_last_event_id(client, new_key, sessions):
    headers = new_key()
    job_id = submit(client, headers).json()["id"]
    _run_steps(sessions, job_id, [3.0, 1.0], final="succeeded")
    # queued, running, step 0, step 1, succeeded: the stream ends once the job is finished.
    everything = _sse(client.get(f"/api/v1/jobs/{job_id}/events", headers=headers).text)
    assert [e["id"] for e in everything] == [1, 2, 3, 4, 5]
    assert [e["event"] for e in everything] == ["state", "state", "step", "step", "state"]
    assert everything[2]["data"]["step"]["candidate_code"] == "# kernel 0"
    assert everything[-1]["data"]["state"] == "succeeded"
    resumed = _sse(client.get(f"/api/v1/jobs/{job_id}/events", headers={**headers, "Last-Event-ID": "3"}).text)
    assert [e["id"] for e in resumed] == [4, 5]
    after = _sse(client.get(f"/api/v1/jobs/{job_id}/events?after=4", headers=headers).text)
    assert [e["id"] for e in after] == [5]


def test_idempotency_key_makes_one_job(client, new_key, redis_client, settings):
    headers = {**new_key(), "Idempotency-Key": "submit-once"}
    before = queue_length(redis_client, settings, IDLE_QUEUE)
    first = submit(client, headers)
    second = submit(client, headers)
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert client.get("/api/v1/jobs", headers=headers).json()["count"] == 1
    assert queue_length(redis_client, settings, IDLE_QUEUE) == before + 1


def test_metrics_and_openapi(client, new_key):
    headers = new_key()
    submit(client, headers)
    text = client.get("/api/v1/metrics", headers=headers).text
    assert 'kloom_jobs{state="queued"}' in text
    assert "kloom_http_request_duration_seconds_bucket" in text and 'route="/api/v1/jobs"' in text
    assert f'kloom_queue_depth{{queue="{IDLE_QUEUE}"}}' in text
    spec = client.get("/openapi.json").json()
    assert "/api/v1/jobs/{job_id}/events" in spec["paths"] and "/api/v1/batches" in spec["paths"]


def test_a_batch_of_named_workloads_runs_only_those(client, new_key):
    headers = new_key()
    names = ["tp_gemm_allreduce", "all_gather", "all_gather"]  # a repeat runs once
    r = client.post("/api/v1/batches", json={"suite": "kloom", "world_size": 2, "max_iters": 1, "workloads": names}, headers=headers)
    assert r.status_code == 201, r.text
    batch = r.json()
    assert sorted(w["workload_name"] for w in batch["workloads"]) == ["all_gather", "tp_gemm_allreduce"]
    assert batch["settings"]["workloads"] == names
    again = client.get(f"/api/v1/batches/{batch['id']}", headers=headers).json()
    assert len(again["workloads"]) == 2


def test_the_job_record_says_what_the_job_found(client, new_key, sessions):
    """The listing carries the job's outcome: a speedup without an interval that clears 1.0 is no
    measurable win, and the reference stands at 1.00x."""
    headers = new_key()
    unsure = submit(client, headers).json()["id"]
    _run_steps(sessions, unsure, [0.5], final="succeeded")  # 4.0x by its medians, no interval
    job = client.get(f"/api/v1/jobs/{unsure}", headers=headers).json()
    assert job["best_speedup"] == 4.0 and job["outcome"] == "no faster kernel found" and job["result_speedup"] == 1.0
    sure = submit(client, headers).json()["id"]
    with sessions() as s, s.begin():
        claim = job_ops.claim(s, sure, "test-worker", max_attempts=3, dead_after_s=60)
    step = _step(0, 0.5)
    step.evaluation.timing.speedup_ci_low, step.evaluation.timing.speedup_ci_high = 3.6, 4.4
    traj = Trajectory(job=JobSpec(workload="w.py", world_size=2), steps=[step], state="succeeded")
    DBSink(sessions, sure, claim.attempt).save(traj, step)
    listed = {j["id"]: j for j in client.get("/api/v1/jobs", headers=headers).json()["data"]}
    assert listed[sure]["outcome"] == "faster kernel found" and listed[sure]["result_speedup"] == 4.0
    assert listed[unsure]["outcome"] == "no faster kernel found"
