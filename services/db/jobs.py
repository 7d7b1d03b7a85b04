"""A job's state machine and its numbered events, shared by the API, the task and the sweep.

Every transition is a compare-and-set ``UPDATE ... WHERE state = ...``, so that two writers (the
API cancelling, a worker finishing, a sweep requeuing) can never both win; each one that does win
appends its event in the same transaction.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from agents.records import FINISHED_STATES, JobRequest, JobSpec, Limits
from kloom.clock import utcnow

from .models import Job, JobEvent, StepRecord, Worker


def job_request(job: Job) -> JobRequest:
    """What a job's row asks for."""
    return JobRequest(world_size=job.world_size, device_kind=job.device_kind, strategist=job.strategist, shapes=job.shapes,
                      limits=Limits(**job.limits), use_kb=job.use_kb, profile=job.profile,
                      options={k: v for k, v in job.options.items() if k not in ("use_kb", "profile")})


def job_spec(job: Job, workload: str) -> JobSpec:
    """The loop's ``JobSpec`` for a job row; ``workload``: where its source was written (or its name,
    for a job that has not run)."""
    return job_request(job).spec(workload, job.id)


def append_event(session: Session, job_id: str, kind: str, payload: dict[str, Any]) -> int:
    """Add the job's next event; its number comes from the job row, whose lock orders the writers."""
    seq = session.execute(
        update(Job).where(Job.id == job_id).values(event_seq=Job.event_seq + 1).returning(Job.event_seq)
    ).scalar_one()
    session.add(JobEvent(job_id=job_id, seq=seq, kind=kind, payload=payload))
    return seq


def state_payload(job: Job) -> dict[str, Any]:
    return {
        "state": job.state,
        "stop_reason": job.stop_reason,
        "attempts": job.attempts,
        "worker_id": job.worker_id,
        "best_speedup": job.best_speedup,
    }


def _transition(session: Session, job_id: str, where, values: dict[str, Any]) -> Job | None:
    """Apply ``values`` if the job matches ``where``; record a state event; return the job or None."""
    values = {**values, "updated_at": utcnow()}
    changed = session.execute(update(Job).where(Job.id == job_id, where).values(**values)).rowcount
    if not changed:
        return None
    job = session.get(Job, job_id, populate_existing=True)
    append_event(session, job_id, "state", state_payload(job))
    return job


def worker_alive(session: Session, worker_id: str | None, dead_after_s: float, now: dt.datetime | None = None) -> bool:
    if worker_id is None:
        return False
    worker = session.get(Worker, worker_id)
    if worker is None or worker.stopped_at is not None:
        return False
    return worker.last_heartbeat >= (now or utcnow()) - dt.timedelta(seconds=dead_after_s)


@dataclass
class Claim:
    """What a task may do with its job: ``run`` it (as attempt ``attempt``), or nothing, and why."""

    action: str  # "run" or "skip"
    reason: str
    attempt: int = 0
    resuming: bool = False


def claim(session: Session, job_id: str, worker_id: str, *, max_attempts: int, dead_after_s: float) -> Claim:
    """Take the job for ``worker_id`` if it is queued, or running on a worker that died.

    Called by every delivery of the job's task, so that a duplicate or redelivered task does
    nothing while the job is finished or running on a live worker.
    """
    job = session.get(Job, job_id)
    if job is None:
        return Claim("skip", "no such job")
    if job.finished:
        return Claim("skip", f"already {job.state}")
    if job.state == "running" and job.worker_id != worker_id and worker_alive(session, job.worker_id, dead_after_s):
        return Claim("skip", f"running on {job.worker_id}")
    # Queued, or running on a dead worker, or on this worker's previous child process (a worker
    # runs one job at a time, so a running job of its own is a leftover of a process that died).
    if job.attempts >= max_attempts:
        _transition(
            session,
            job_id,
            and_(Job.state == job.state, Job.attempts == job.attempts),
            {
                "state": "failed",
                "stop_reason": f"gave up after {job.attempts} attempts: the workers running it stopped",
                "finished_at": utcnow(),
                "worker_id": None,
            },
        )
        return Claim("skip", "too many attempts")
    resuming = job.num_steps > 0 or job.trajectory is not None
    won = _transition(
        session,
        job_id,
        and_(Job.state == job.state, Job.attempts == job.attempts),
        {
            "state": "running",
            "worker_id": worker_id,
            "attempts": job.attempts + 1,
            "started_at": job.started_at or utcnow(),
        },
    )
    if won is None:
        return Claim("skip", "another worker claimed it first")
    return Claim("run", "resumed" if resuming else "started", attempt=won.attempts, resuming=resuming)


def requeue(session: Session, job: Job, reason: str) -> Job | None:
    """A running job back to queued (its worker died); its recorded steps stay."""
    return _transition(
        session,
        job.id,
        and_(Job.state == "running", Job.attempts == job.attempts),
        {"state": "queued", "worker_id": None, "stop_reason": reason, "dispatched_at": utcnow()},
    )


def fail(session: Session, job: Job, reason: str) -> Job | None:
    return _transition(
        session,
        job.id,
        and_(Job.state == job.state, Job.attempts == job.attempts),
        {"state": "failed", "stop_reason": reason, "finished_at": utcnow(), "worker_id": None},
    )


def finish(session: Session, job_id: str, attempt: int, state: str, reason: str) -> Job | None:
    """End the run ``attempt`` of the job with a final state (only while that run still holds it)."""
    if state not in FINISHED_STATES:
        raise ValueError(f"{state!r} is not a final state")
    return _transition(
        session,
        job_id,
        and_(Job.state == "running", Job.attempts == attempt),
        {"state": state, "stop_reason": reason, "finished_at": utcnow()},
    )


def request_cancel(session: Session, job: Job) -> Job | None:
    """Cancel a queued job at once; ask a running one to stop at its next step (it keeps its best)."""
    if job.state == "queued":
        return _transition(
            session,
            job.id,
            Job.state == "queued",
            {"state": "cancelled", "stop_reason": "cancelled by the user", "finished_at": utcnow(), "cancel_requested": True},
        )
    if job.state == "running":
        changed = session.execute(
            update(Job)
            .where(Job.id == job.id, Job.state == "running")
            .values(cancel_requested=True, updated_at=utcnow())
        ).rowcount
        if changed:
            job = session.get(Job, job.id, populate_existing=True)
            append_event(session, job.id, "cancel", {"state": job.state, "cancel_requested": True})
            return job
    return None


def record_step(session: Session, job_id: str, step: dict[str, Any], speedup: float | None) -> bool:
    """Insert a step and its event unless that index is already recorded (a redelivered task)."""
    index = step["index"]
    exists = session.scalar(select(StepRecord.id).where(StepRecord.job_id == job_id, StepRecord.index == index))
    if exists is not None:
        return False
    session.add(StepRecord(job_id=job_id, index=index, status=step["status"], speedup=speedup, data=step))
    append_event(
        session,
        job_id,
        "step",
        {"index": index, "status": step["status"], "speedup": speedup, "strategy": step["plan"]["strategy"]},
    )
    return True


def stale_running_jobs(session: Session, dead_after_s: float, now: dt.datetime | None = None) -> list[Job]:
    """Running jobs whose worker is gone: stopped or silent for ``dead_after_s``, or (after the
    same quiet time, so that a worker that is registering is not caught) never registered."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=dead_after_s)
    dead = select(Worker.id).where(or_(Worker.last_heartbeat < cutoff, Worker.stopped_at.is_not(None)))
    unknown = or_(Job.worker_id.is_(None), Job.worker_id.not_in(select(Worker.id)))
    return list(
        session.scalars(
            select(Job).where(
                Job.state == "running",
                or_(Job.worker_id.in_(dead), and_(unknown, Job.updated_at < cutoff)),
            )
        )
    )


def stuck_running_jobs(session: Session, limit_s: float, now: dt.datetime | None = None) -> list[Job]:
    """Running jobs with no step or state change for ``limit_s`` (their run was killed by the
    task's hard time limit while the worker itself lives on)."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=limit_s)
    return list(session.scalars(select(Job).where(Job.state == "running", Job.updated_at < cutoff)))


def lost_queued_jobs(session: Session, after_s: float, now: dt.datetime | None = None) -> list[Job]:
    """Queued jobs whose task was sent ``after_s`` ago and never taken (a broker that lost it)."""
    cutoff = (now or utcnow()) - dt.timedelta(seconds=after_s)
    return list(
        session.scalars(select(Job).where(Job.state == "queued", or_(Job.dispatched_at.is_(None), Job.dispatched_at < cutoff)))
    )
