"""The API process killed and started again while clients follow a job's event stream: each client
reconnects as a browser's EventSource does (``Last-Event-ID``, or ``?after=N``) and ends with every
event exactly once, in order, including those written while the API was down."""

from __future__ import annotations

import pytest

from agents.records import JobSpec, Plan, Step, Trajectory
from reliability_helpers import ApiServer, StreamFollower, consistency_problems
from service_helpers import submit, wait_for
from services.db import jobs as job_ops
from services.db.sink import DBSink

FOLLOWERS = 6


def _steps(sink: DBSink, traj: Trajectory, count: int) -> None:
    """What a worker records: ``count`` more steps, each saved with its event."""
    for _ in range(count):
        step = Step(index=len(traj.steps), plan=Plan(strategy="scripted"), status="incorrect", error="written by the test")
        traj.steps.append(step)
        sink.save(traj, step)


@pytest.mark.slow
def test_event_stream_clients_resume_across_an_api_restart(settings, sessions, run_id, tmp_path, record_property):
    s = settings.model_copy(update={"broker_key_prefix": f"kloomrel-{run_id}-sse:"})
    api = ApiServer(s, tmp_path / "api.log")
    api.start()
    try:
        import httpx

        headers = {"Authorization": f"Bearer {s.admin_key_value()}"}
        with httpx.Client(base_url=api.base, timeout=30) as client:
            job_id = submit(client, headers).json()["id"]  # to a queue no worker serves
        # This test is the job's worker: it claims the job and records its steps through the
        # service's own sink, at chosen moments.
        with sessions() as session, session.begin():
            claim = job_ops.claim(session, job_id, "relworker@test", max_attempts=3, dead_after_s=60)
        sink = DBSink(sessions, job_id, claim.attempt)
        traj = Trajectory(job=JobSpec(workload="w.py", world_size=2), state="running")

        followers = [StreamFollower(api.base, job_id, headers, use_query=i % 2 == 1).start() for i in range(FOLLOWERS)]
        _steps(sink, traj, 3)
        wait_for(lambda: all(len(f.events) >= 5 for f in followers), 30, "every client to see the first five events")

        api.kill()
        _steps(sink, traj, 3)  # recorded while no API runs
        api.start()
        _steps(sink, traj, 2)
        traj.state, traj.stop_reason = "failed", "no correct candidate (scripted)"
        sink.save(traj, None)

        for follower in followers:
            assert follower.done.wait(60), "a client never reached the end of the stream"
        with sessions() as session:
            from services.db.models import Job

            last = session.get(Job, job_id).event_seq
        for follower in followers:
            ids = [e["id"] for e in follower.events]
            assert ids == list(range(1, last + 1)), f"missed or repeated events: {ids}"
            assert follower.reconnects >= 1 and not follower.error
            assert follower.events[-1]["data"]["state"] == "failed"
            assert [e["data"]["index"] for e in follower.events if e["event"] == "step"] == list(range(8))
        assert consistency_problems(sessions, [job_id]) == []
        record_property("events_per_client", last)
        record_property("reconnects", [f.reconnects for f in followers])
    finally:
        api.stop()
