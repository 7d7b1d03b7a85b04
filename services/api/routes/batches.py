"""Batches: a suite run is one job per workload of the suite that supports the world size; its
progress is derived from those jobs."""

from __future__ import annotations

import math
import statistics
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import delete, func, select

from kloom import suite
from kloom.workload import read_source
from services.db.models import FINISHED_STATES, Batch, Job
from services.worker.celery_app import dispatch

from .. import workloads
from ..deps import CeleryDep, CurrentKey, SessionDep, SettingsDep
from ..schemas import BatchCreate, BatchesPublic, BatchPublic, BatchSummary, BatchWorkload
from .jobs import broker_unavailable, new_job

router = APIRouter(prefix="/batches", tags=["batches"])


@router.post("", status_code=status.HTTP_201_CREATED)
def create_batch(data: BatchCreate, key: CurrentKey, session: SessionDep, settings: SettingsDep, celery: CeleryDep) -> BatchPublic:
    """Run a suite: one job per workload that supports ``world_size``, all in one transaction."""
    root = workloads.suite_root(data.suite, settings)
    found = suite.workloads(root, world_size=data.world_size)
    if data.workloads:
        found = _chosen(data, suite.workloads(root), found)
    if not found:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"no workload of the {data.suite} suite supports world size {data.world_size}"
        )
    settings_record = data.model_dump(exclude={"suite"})
    batch = Batch(owner_key_id=key.id, suite=data.suite, settings=settings_record)
    session.add(batch)
    session.flush()
    jobs = []
    for info in found:
        workload = workloads.Workload(info, read_source(info.path))
        workloads.check_settings(info, data, settings)
        jobs.append(new_job(session, key.id, workload, data, batch_id=batch.id))
    session.commit()
    try:
        for job in jobs:
            dispatch(celery, job.id, job.device_kind)
    except Exception as exc:  # kombu raises transport-specific errors
        session.execute(delete(Job).where(Job.batch_id == batch.id))
        session.execute(delete(Batch).where(Batch.id == batch.id))
        session.commit()
        raise broker_unavailable(exc) from None
    return batch_public(batch, jobs, with_workloads=True)


def _chosen(data: BatchCreate, every: list, supported: list) -> list:
    """The named workloads of the suite, each known and supporting the world size (else a 422 that
    names the ones that are not), in the suite's order, without repeats."""
    names = {w.name for w in every}
    unknown = [n for n in dict.fromkeys(data.workloads) if n not in names]
    if unknown:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"no workload named {', '.join(map(repr, unknown))} in the {data.suite} suite")
    wanted = set(data.workloads)
    unsupported = sorted(wanted - {w.name for w in supported})
    if unsupported:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"world size {data.world_size} is not among the WORLD_SIZES of {', '.join(map(repr, unsupported))}"
        )
    return [w for w in supported if w.name in wanted]


@router.get("")
def list_batches(
    key: CurrentKey,
    session: SessionDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> BatchesPublic:
    """The key's batches, newest first, with their summaries."""
    where = Batch.owner_key_id == key.id
    count = session.scalar(select(func.count()).select_from(Batch).where(where))
    batches = session.scalars(select(Batch).where(where).order_by(Batch.created_at.desc(), Batch.id).offset(offset).limit(limit)).all()
    jobs: dict[str, list[Job]] = {b.id: [] for b in batches}
    if batches:
        for job in session.scalars(select(Job).where(Job.batch_id.in_(list(jobs)))):
            jobs[job.batch_id].append(job)
    return BatchesPublic(data=[batch_public(b, jobs[b.id]) for b in batches], count=count)


@router.get("/{batch_id}")
def get_batch(batch_id: str, key: CurrentKey, session: SessionDep) -> BatchPublic:
    """A batch with the progress of each of its workloads."""
    batch = session.get(Batch, batch_id)
    if batch is None or batch.owner_key_id != key.id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no batch {batch_id!r}")
    jobs = session.scalars(select(Job).where(Job.batch_id == batch_id).order_by(Job.workload_family, Job.workload_name)).all()
    return batch_public(batch, jobs, with_workloads=True)


def batch_public(batch: Batch, jobs: list[Job], *, with_workloads: bool = False) -> BatchPublic:
    return BatchPublic(
        id=batch.id,
        suite=batch.suite,
        settings=batch.settings,
        created_at=batch.created_at,
        summary=summarize(jobs),
        workloads=[BatchWorkload(job_id=j.id, **_progress(j)) for j in jobs] if with_workloads else None,
    )


def _progress(job: Job) -> dict:
    fields = ("workload_name", "workload_family", "state", "stop_reason", "num_steps", "best_speedup", "best_fraction_of_floor", "cost_usd")
    return {f: getattr(job, f) for f in fields}


def summarize(jobs: list[Job]) -> BatchSummary:
    """Correctness, fast_1, geometric-mean speedup and median fraction of floor over the jobs so far."""
    by_state: dict[str, int] = {}
    for job in jobs:
        by_state[job.state] = by_state.get(job.state, 0) + 1
    speedups = [j.best_speedup for j in jobs if j.best_speedup is not None and j.best_speedup > 0]
    fractions = [j.best_fraction_of_floor for j in jobs if j.best_fraction_of_floor is not None]
    return BatchSummary(
        total=len(jobs),
        finished=sum(1 for j in jobs if j.state in FINISHED_STATES),
        by_state=by_state,
        correct=sum(1 for j in jobs if j.best_step_index is not None),
        fast_1=sum(1 for s in speedups if s > 1.0) / len(jobs) if jobs else None,
        geomean_speedup=math.exp(statistics.fmean(math.log(s) for s in speedups)) if speedups else None,
        median_fraction_of_floor=statistics.median(fractions) if fractions else None,
        cost_usd=sum(j.cost_usd or 0.0 for j in jobs),
    )
