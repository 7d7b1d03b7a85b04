"""What the dashboard reads beyond the resource routes: the suite's workloads (for the submit form),
a job's trajectory record without its steps (baseline and roofline, for the plot), and a batch's
report and its comparison with another batch, built with ``kloom.batch.report``'s own functions so
that they match ``kloom bench`` field for field."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from agents.records import Trajectory, device_of
from kloom import suite as kloom_suite
from kloom.batch import report as batch_report
from kloom.batch.rows import report_row
from services.db.jobs import job_spec
from services.db.models import Batch, Job, StepRecord

from .. import workloads
from ..deps import CurrentKey, SessionDep, SettingsDep, owned_job

router = APIRouter(tags=["dashboard"])


class SuiteWorkload(BaseModel):
    name: str
    family: str
    world_sizes: list[int]
    description: str
    has_roofline: bool


class SuitePublic(BaseModel):
    suite: str
    data: list[SuiteWorkload]
    count: int


class TrajectoryPublic(BaseModel):
    """A job's trajectory record without its steps (those come from ``/steps`` and the event stream)."""

    job_id: str
    state: str
    stop_reason: str
    baseline: dict[str, Any] | None = Field(description="The reference timed alone (BaselineResult), once measured.")
    analysis: dict[str, Any] | None = Field(description="What the reference does (collectives, ops, roofline terms).")
    reference_ms: float | None
    floor_ms: float | None
    dominant: str | None = Field(description="compute, hbm or link: the term that sets the roofline floor.")
    floor_speedup: float | None = Field(description="reference_ms / floor_ms: the speedup at the roofline floor.")
    usage: dict[str, Any] = Field(description="Model usage of the whole job, steps and overhead.")


class BatchReport(BaseModel):
    """The structure of ``kloom.batch.report.build_report``, from the batch's jobs."""

    batch_id: str
    version: int
    settings: dict[str, Any]
    environment: dict[str, Any]
    aggregate: dict[str, Any]
    rows: list[dict[str, Any]]
    below_half_of_floor: list[dict[str, Any]]
    left_out: list[dict[str, Any]]


class BatchComparison(BaseModel):
    """``kloom.batch.report.compare`` of two batches' reports: A is this batch, B the other."""

    a: str
    b: str
    aggregate: dict[str, list[Any]]
    workloads: list[dict[str, Any]]


@router.get("/suite")
def list_suite(
    _key: CurrentKey,
    settings: SettingsDep,
    suite: Annotated[str, Query(max_length=200, description="kloom (built in) or an imported suite's name.")] = "kloom",
) -> SuitePublic:
    """The suite's workloads, read statically (never run): what a job or a batch can name."""
    found, _problems = kloom_suite.discover(workloads.suite_root(suite, settings))
    data = [
        SuiteWorkload(
            name=w.name, family=w.family, world_sizes=list(w.world_sizes), description=w.description, has_roofline=w.has_roofline
        )
        for w in found
    ]
    return SuitePublic(suite=suite, data=data, count=len(data))


@router.get("/jobs/{job_id}/trajectory")
def job_trajectory(job_id: str, key: CurrentKey, session: SessionDep) -> TrajectoryPublic:
    """The job's baseline, roofline floor and analysis, as its worker saved them after the last step."""
    job = owned_job(session, key, job_id)
    steps = session.scalars(select(StepRecord.data).where(StepRecord.job_id == job_id).order_by(StepRecord.index)).all()
    traj = job_trajectory_record(job, list(steps))
    baseline = traj.baseline
    roofline = baseline.roofline if baseline else None
    reference_ms = baseline.reference_ms if baseline else None
    floor_ms = roofline.floor_ms if roofline else None
    usage = traj.usage
    return TrajectoryPublic(
        job_id=job.id,
        state=job.state,
        stop_reason=job.stop_reason,
        baseline=baseline.to_dict() if baseline else None,
        analysis=traj.analysis.to_dict() if traj.analysis else None,
        reference_ms=reference_ms,
        floor_ms=floor_ms,
        dominant=roofline.dominant if roofline else None,
        floor_speedup=reference_ms / floor_ms if reference_ms and floor_ms else None,
        usage={"calls": usage.calls, "tokens": usage.tokens, "cost_usd": usage.cost_usd, "model": usage.model},
    )


@router.get("/batches/{batch_id}/report")
def get_batch_report(batch_id: str, key: CurrentKey, session: SessionDep) -> BatchReport:
    """The batch's report so far: per-workload rows and the aggregates (fast_p, geomean, floor)."""
    return BatchReport(batch_id=batch_id, **build_batch_report(session, _owned_batch(session, key, batch_id)).to_dict())


@router.get("/batches/{batch_id}/compare")
def compare_batches(
    batch_id: str,
    key: CurrentKey,
    session: SessionDep,
    other: Annotated[str, Query(max_length=32, description="The batch to compare with (B).")],
) -> BatchComparison:
    """What changed from this batch (A) to ``other`` (B): aggregates and per-workload speedups."""
    a = build_batch_report(session, _owned_batch(session, key, batch_id))
    b = build_batch_report(session, _owned_batch(session, key, other))
    changes = batch_report.compare(a, b).to_dict()
    return BatchComparison(a=batch_id, b=other, aggregate={k: list(v) for k, v in changes["aggregate"].items()}, workloads=changes["workloads"])


def _owned_batch(session: Session, key, batch_id: str) -> Batch:
    batch = session.get(Batch, batch_id)
    if batch is None or batch.owner_key_id != key.id:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no batch {batch_id!r}")
    return batch


def job_trajectory_record(job: Job, steps: list[dict[str, Any]]) -> Trajectory:
    """The job's ``Trajectory`` from its saved record and step rows; the job row's state is the truth.

    A job that has not started yet has no saved record: it becomes an empty trajectory of its spec.
    """
    if job.trajectory:
        traj = Trajectory.from_dict({**job.trajectory, "steps": steps})
    else:
        spec = job_spec(job, job.workload_name)
        traj = Trajectory(job=spec, workload_name=job.workload_name, workload_sha256=job.workload_sha256, workload_family=job.workload_family)
    traj.state, traj.stop_reason = job.state, job.stop_reason
    return traj


def build_batch_report(session: Session, batch: Batch) -> batch_report.BatchReport:
    """``build_report``'s structure for a batch submitted over the API, from its jobs and their steps."""
    jobs = session.scalars(select(Job).where(Job.batch_id == batch.id)).all()
    steps: dict[str, list[dict[str, Any]]] = {job.id: [] for job in jobs}
    if jobs:
        rows = session.execute(
            select(StepRecord.job_id, StepRecord.data).where(StepRecord.job_id.in_(list(steps))).order_by(StepRecord.index)
        )
        for job_id, data in rows:
            steps[job_id].append(data)
    trajectories = [job_trajectory_record(job, steps[job.id]) for job in jobs]
    # The batch report's own row builder and assembly, so that the API's report and ``kloom bench report`` agree.
    rows = [dataclasses.replace(report_row(t), job_id=job.id) for job, t in zip(jobs, trajectories)]
    settings = {"suite": batch.suite, **batch.settings, "device": device_of(batch.settings.get("device_kind", "cpu"))}
    return batch_report.assemble(settings, trajectories, rows, [])
