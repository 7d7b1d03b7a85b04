"""Batches: a suite run is one job per workload of the suite that supports the world size; its
progress is derived from those jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status
from sqlalchemy import delete, func, select

from kloom import suite
from kloom.batch.aggregate import aggregate
from kloom.batch.rows import ReportRow
from kloom.workload import read_source
from services.db.models import Batch, Job
from services.worker.broker import dispatch

from .. import workloads
from ..deps import CeleryDep, CurrentKey, SessionDep, SettingsDep
from ..schemas import MAX_INT, BatchCreate, BatchesPublic, BatchPublic, BatchSummary, BatchWorkload
from .jobs import broker_unavailable, check_device_kind, new_job

router = APIRouter(prefix="/batches", tags=["batches"])


@router.post("", status_code=status.HTTP_201_CREATED)
def create_batch(data: BatchCreate, key: CurrentKey, session: SessionDep, settings: SettingsDep, celery: CeleryDep) -> BatchPublic:
    """Run a suite: one job per workload that supports ``world_size``, all in one transaction."""
    picked = suite.select(workloads.suite_root(data.suite, settings), data.world_size, data.workloads)
    if picked.unknown:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"no workload named {', '.join(map(repr, picked.unknown))} in the {data.suite} suite")
    if data.workloads and picked.unsupported:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, f"world size {data.world_size} is not among the WORLD_SIZES of "
                            f"{', '.join(repr(name) for name, _ in sorted(picked.unsupported))}")
    found = picked.chosen
    if not found:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT, f"no workload of the {data.suite} suite supports world size {data.world_size}"
        )
    for info in found:
        workloads.check_settings(info, data, settings)
    check_device_kind(session, settings, data.device_kind)
    settings_record = data.model_dump(exclude={"suite"})
    batch = Batch(owner_key_id=key.id, suite=data.suite, settings=settings_record)
    session.add(batch)
    session.flush()
    jobs = []
    for info in found:
        workload = workloads.Workload(info, read_source(info.path))
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


@router.get("")
def list_batches(
    key: CurrentKey,
    session: SessionDep,
    offset: Annotated[int, Query(ge=0, le=MAX_INT)] = 0,
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


def job_row(job: Job) -> ReportRow:
    """A report row (``kloom.batch.rows.ReportRow``) of what a job row holds, for the batch's
    aggregate (``kloom.batch.aggregate``): the job's outcome and result speedup as its trajectory
    recorded them (``Job.outcome``, ``Job.result_speedup``: 1.0 where the reference stands), and
    the best kernel's own speedup beside them. A row written before outcomes were recorded counts
    as no measurable win, with its best speedup as its result."""
    correct = job.best_step_index is not None
    return ReportRow(
        workload=job.workload_name,
        family=job.workload_family,
        state=job.state,
        correct=correct,
        outcome=job.outcome,
        speedup=(job.result_speedup if job.outcome else job.best_speedup) if correct else None,
        measured_speedup=job.best_speedup,
        fraction_of_floor=job.best_fraction_of_floor,
        cost_usd=job.cost_usd,
    )


def summarize(jobs: list[Job]) -> BatchSummary:
    """Correctness, fast_1 (measurable wins, and any speedup above 1 as the literature counts),
    the geometric-mean result speedup and the median fraction of floor over the jobs so far: the
    same aggregate, counted the same way, as ``kloom bench report``'s."""
    agg = aggregate([job_row(j) for j in jobs])
    return BatchSummary(
        total=agg.workloads,
        finished=agg.finished,
        by_state=agg.by_state,
        correct=agg.correct,
        fast_1=agg.fast_p["1.0"] if jobs else None,
        fast_1_any=agg.fast_1_any if jobs else None,
        faster_kernel_found=agg.faster_kernel_found or 0,
        geomean_speedup=agg.geomean_speedup,
        median_fraction_of_floor=agg.median_fraction_of_floor,
        cost_usd=agg.known_cost_usd,
    )
