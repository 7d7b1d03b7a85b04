"""Jobs: submit, list, get, cancel, steps (``?after=N``), best kernel, workload source, and the live
event stream (server-sent events, resumable with ``Last-Event-ID`` or ``?after=N``)."""

from __future__ import annotations

import json
from typing import Annotated

import anyio
from fastapi import APIRouter, File, Form, Header, HTTPException, Query, Request, Response, UploadFile, status
from sqlalchemy import delete, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, defer, sessionmaker
from sse_starlette import EventSourceResponse

from agents.records import FINISHED_STATES, Step
from kloom.clock import utcnow
from services.db import jobs as job_ops
from services.db import workers
from services.db.models import Job, JobEvent, StepRecord
from services.worker.broker import dispatch

from .. import workloads
from ..deps import CeleryDep, CurrentKey, SessionDep, SettingsDep, owned_job
from ..schemas import MAX_INT, BestKernel, JobCreate, JobPublic, JobsPublic, JobState, StepPublic, StepsPublic, WorkloadSource

router = APIRouter(prefix="/jobs", tags=["jobs"])

_EVENTS_PER_POLL = 200


def broker_unavailable(exc: Exception) -> HTTPException:
    return HTTPException(
        status.HTTP_503_SERVICE_UNAVAILABLE,
        f"the job queue is unavailable ({type(exc).__name__}); nothing was recorded: submit again shortly",
    )


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": JobPublic, "description": "The job this Idempotency-Key already made."}},
)
def create_job(
    data: Annotated[JobCreate, Form()],
    key: CurrentKey,
    session: SessionDep,
    settings: SettingsDep,
    celery: CeleryDep,
    response: Response,
    workload_file: Annotated[UploadFile | None, File(description="The workload file (KernelBench format, optionally multi-rank).")] = None,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JobPublic:
    """Submit a job: a workload file (``workload_file``) or a suite workload by name (``workload``)."""
    if idempotency_key:
        existing = session.scalar(select(Job).where(Job.owner_key_id == key.id, Job.idempotency_key == idempotency_key))
        if existing is not None:
            response.status_code = status.HTTP_200_OK
            return JobPublic.model_validate(existing)
    if (workload_file is None) == (data.workload is None):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "give either a workload file (workload_file) or the name of a suite workload (workload), not both",
        )
    if workload_file is not None:
        workload = workloads.from_upload(workload_file, settings)
    else:
        workload = workloads.from_suite(data.workload, settings)
    workloads.check_settings(workload.info, data, settings)
    check_device_kind(session, settings, data.device_kind)
    job = new_job(session, key.id, workload, data, idempotency_key=idempotency_key)
    try:
        session.commit()
    except IntegrityError:  # the same Idempotency-Key, submitted concurrently
        session.rollback()
        existing = session.scalar(select(Job).where(Job.owner_key_id == key.id, Job.idempotency_key == idempotency_key))
        if existing is None:
            raise
        response.status_code = status.HTTP_200_OK
        return JobPublic.model_validate(existing)
    try:
        dispatch(celery, job.id, job.device_kind)
    except Exception as exc:  # kombu raises transport-specific errors
        session.execute(delete(Job).where(Job.id == job.id))
        session.commit()
        raise broker_unavailable(exc) from None
    return JobPublic.model_validate(job)


def check_device_kind(session: Session, settings, kind: str) -> None:
    """Refuse a device kind that no worker has ever served here (nor ``expected_device_kinds``
    names): its jobs would wait forever. The answer names the kinds on offer."""
    offered = workers.served_kinds(session) | set(settings.expected_device_kinds)
    session.commit()  # end the read: on SQLite a transaction holds the write lock
    if kind not in offered:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"no worker serves device kind {kind!r} here; kinds on offer: {', '.join(sorted(offered)) or 'none yet (no worker has registered)'}",
        )


def job_public(job: Job, live: set[str]) -> JobPublic:
    """A job as the API shows it, with why it waits when no live worker serves its kind."""
    out = JobPublic.model_validate(job)
    if job.state == "queued":
        out.waiting = workers.waiting_notice(job.device_kind, live)
    return out


def _live(session: Session, settings) -> set[str]:
    return workers.live_kinds(session, settings.worker_dead_after_s)


def new_job(session: Session, owner_key_id: str, workload: workloads.Workload, data, *, batch_id=None, idempotency_key=None) -> Job:
    """Add a queued job and its first event (not committed)."""
    info = workload.info
    job = Job(
        owner_key_id=owner_key_id,
        batch_id=batch_id,
        idempotency_key=idempotency_key,
        workload_name=info.name,
        workload_family=info.family,
        workload_source=workload.source,
        workload_sha256=info.sha256,
        world_size=data.world_size,
        device_kind=data.device_kind,
        shapes=data.shapes,
        strategist=data.strategist,
        limits=data.limits(),
        options={"use_kb": data.use_kb, "profile": data.profile},
        state="queued",
        dispatched_at=utcnow(),
    )
    session.add(job)
    session.flush()
    job_ops.append_event(session, job.id, "state", job_ops.state_payload(job))
    return job


@router.get("")
def list_jobs(
    key: CurrentKey,
    session: SessionDep,
    settings: SettingsDep,
    state: Annotated[JobState | None, Query(description="Only jobs in this state.")] = None,
    batch_id: Annotated[str | None, Query(max_length=32)] = None,
    workload: Annotated[str | None, Query(max_length=200, description="Only jobs whose workload name contains this.")] = None,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> JobsPublic:
    """The key's jobs, newest first."""
    where = [Job.owner_key_id == key.id]
    if state:
        where.append(Job.state == state)
    if batch_id:
        where.append(Job.batch_id == batch_id)
    if workload:
        where.append(Job.workload_name.contains(workload, autoescape=True))
    count = session.scalar(select(func.count()).select_from(Job).where(*where))
    live = _live(session, settings)
    rows = session.scalars(
        select(Job)
        .options(defer(Job.workload_source), defer(Job.trajectory))  # large, and not part of a listing
        .where(*where)
        .order_by(Job.created_at.desc(), Job.id)
        .offset(offset)
        .limit(limit)
    ).all()
    return JobsPublic(data=[job_public(j, live) for j in rows], count=count)


@router.get("/{job_id}")
def get_job(job_id: str, key: CurrentKey, session: SessionDep, settings: SettingsDep) -> JobPublic:
    job = owned_job(session, key, job_id)
    return job_public(job, _live(session, settings))


@router.post("/{job_id}/cancel")
def cancel_job(job_id: str, key: CurrentKey, session: SessionDep) -> JobPublic:
    """Cancel a queued job now, or a running one at its next step (it keeps its best kernel)."""
    job = owned_job(session, key, job_id)
    if job.finished:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} already {job.state}")
    changed = job_ops.request_cancel(session, job)
    session.commit()
    if changed is None:  # it finished meanwhile
        session.refresh(job)
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {job_id} already {job.state}")
    return JobPublic.model_validate(changed)


@router.get("/{job_id}/steps")
def list_steps(
    job_id: str,
    key: CurrentKey,
    session: SessionDep,
    after: Annotated[int, Query(ge=-1, le=MAX_INT, description="Only steps with a larger index (-1: all).")] = -1,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> StepsPublic:
    """The job's steps after index ``after``, in order."""
    owned_job(session, key, job_id)
    count = session.scalar(select(func.count()).select_from(StepRecord).where(StepRecord.job_id == job_id))
    rows = session.scalars(
        select(StepRecord).where(StepRecord.job_id == job_id, StepRecord.index > after).order_by(StepRecord.index).limit(limit)
    )
    return StepsPublic(data=[StepPublic.model_validate(s) for s in rows], count=count)


@router.get("/{job_id}/best")
def best_kernel(job_id: str, key: CurrentKey, session: SessionDep) -> BestKernel:
    """The fastest correct candidate so far."""
    job = owned_job(session, key, job_id)
    if job.best_step_index is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id} has no correct kernel yet")
    step = session.scalar(select(StepRecord).where(StepRecord.job_id == job_id, StepRecord.index == job.best_step_index))
    best = Step.from_dict(step.data)
    timing = best.timing
    roofline = best.evaluation.roofline if best.evaluation else None
    return BestKernel(
        job_id=job_id,
        step_index=step.index,
        strategy=best.plan.strategy,
        speedup=step.speedup,
        candidate_ms=timing.candidate_ms if timing else None,
        fraction_of_floor=roofline.fraction_of_floor if roofline else None,
        candidate_sha256=best.candidate_sha256,
        code=best.candidate_code or "",
    )


@router.get("/{job_id}/workload")
def workload_source(job_id: str, key: CurrentKey, session: SessionDep) -> WorkloadSource:
    """The workload source the job was submitted with."""
    job = owned_job(session, key, job_id)
    return WorkloadSource(name=job.workload_name, sha256=job.workload_sha256, source=job.workload_source)


@router.get(
    "/{job_id}/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "Server-sent events: `step`, `state`, `cancel`."}},
)
async def job_events(
    job_id: str,
    request: Request,
    key: CurrentKey,
    session: SessionDep,
    after: Annotated[int | None, Query(ge=0, le=MAX_INT, description="Send events after this number.")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The job's events from the one after ``Last-Event-ID`` (or ``after``); ends once the job has
    finished and every event has been sent."""
    await anyio.to_thread.run_sync(owned_job, session, key, job_id)
    session.close()  # the stream polls with short sessions of its own; hold no connection
    start = after or 0
    if last_event_id and last_event_id.strip().isascii() and last_event_id.strip().isdigit():
        start = max(start, min(int(last_event_id.strip()), MAX_INT))  # no event is numbered past it
    sessions = request.app.state.sessions
    poll = request.app.state.settings.sse_poll_s

    async def stream():
        last = start
        while not await request.is_disconnected():
            try:
                events, finished = await anyio.to_thread.run_sync(_events_after, sessions, job_id, last)
            except DBAPIError:
                await anyio.sleep(poll * 4)  # the database is away; the client stays connected
                continue
            for event in events:
                last = event["id"]
                yield {"id": str(event["id"]), "event": event["event"], "data": json.dumps(event["data"])}
            if finished and len(events) < _EVENTS_PER_POLL:
                return
            if not events:
                await anyio.sleep(poll)

    return EventSourceResponse(stream(), ping=15)


def _events_after(sessions: sessionmaker[Session], job_id: str, after: int) -> tuple[list[dict], bool]:
    with sessions() as session:
        finished = session.scalar(select(Job.state).where(Job.id == job_id)) in FINISHED_STATES
        rows = session.scalars(
            select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.seq > after).order_by(JobEvent.seq).limit(_EVENTS_PER_POLL)
        ).all()
        indices = [r.payload["index"] for r in rows if r.kind == "step"]
        steps = {}
        if indices:
            steps = {
                s.index: s.data
                for s in session.scalars(select(StepRecord).where(StepRecord.job_id == job_id, StepRecord.index.in_(indices)))
            }
        events = []
        for row in rows:
            data = {"seq": row.seq, "job_id": job_id, "created_at": row.created_at.isoformat(), **row.payload}
            if row.kind == "step":
                data["step"] = steps.get(row.payload["index"])
            events.append({"id": row.seq, "event": row.kind, "data": data})
        return events, finished
