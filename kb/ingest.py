"""Filling the knowledge base: ``ingest`` turns one finished trajectory into kernels, strategy
evidence and failures in one transaction; a job is ingested once (re-ingesting it changes nothing)
and two jobs ingesting at the same time both land: counters are updated by single ``INSERT .. ON
CONFLICT DO UPDATE`` statements, taken in a fixed order so that concurrent transactions cannot
deadlock."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, or_
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from agents.records import NOT_EVALUATED, Step, Trajectory  # NOT_EVALUATED: neither evidence for nor against
from kloom.clock import utcnow
from kloom.speedup import REFERENCE_COPY

from . import admission
from .models import KBEvidence, KBFailure, KBJob, KBKernel, KBStrategy, KBWorkload
from .signature import Signature
from .store import get_kernel

FINISHED_STATES = frozenset({"succeeded", "failed", "cancelled", "stopped"})
#: A candidate beats its baseline when its speedup clears the timing noise: by at least this much,
#: and by more than the reference's own time drifted between its timings before and after the
#: candidate's (on a busy machine a copy of the reference can measure 1.4x).
MIN_GAIN = 0.02
_REASON_CHARS = 300


@dataclass
class IngestReport:
    job_id: str
    ingested: bool  # False when the job was already in the knowledge base (nothing changed)
    kernels: int = 0
    strategies: int = 0
    failures: int = 0



def job_key(trajectory: Trajectory) -> str:
    """The job's id, or (for a CLI run without one) a digest of what identifies the run."""
    if trajectory.job.job_id:
        return trajectory.job.job_id
    raw = f"{trajectory.workload_sha256}|{trajectory.job.world_size}|{trajectory.job.device}|{trajectory.created_at}"
    return "local-" + hashlib.sha256(raw.encode()).hexdigest()[:24]


def beat_baseline(step: Step, bias: float = 0.0) -> bool:
    """Whether a step's candidate was correct and measurably faster than the reference. The
    reference run as a candidate (``reference_copy``) never is: its speedup measures noise.
    ``bias``: the job's side bias (``Trajectory.self_bias``), which the win must clear too."""
    speedup = step.speedup
    if speedup is None or step.plan.strategy == REFERENCE_COPY:
        return False
    timing = step.timing
    margin = max(MIN_GAIN, bias)
    after = timing.reference_after
    if after and timing.reference_ms:
        again = max(t.median_ms for t in after)
        margin = max(margin, abs(again / timing.reference_ms - 1))
    return speedup > 1 + margin


def params_key(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params or {}, sort_keys=True, default=str).encode()).hexdigest()[:32]


def failure_reason(step: Step) -> str:
    """Why a step failed, in one short line: its error, else the evaluator's message."""
    evaluation = step.evaluation
    trials = evaluation.trials if evaluation else []
    mismatch = next((c.message for t in trials for c in t.ranks if not c.ok), "")
    error = evaluation.error if evaluation else None
    text = step.error or (error.message if error else "") or mismatch or step.feedback or step.status
    first = next((line.strip() for line in str(text).splitlines() if line.strip()), step.status)
    return first[:_REASON_CHARS]


def _insert(session: Session, model):
    """The dialect's INSERT, which has ``on_conflict_do_*`` on PostgreSQL and SQLite alike."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql_insert(model)
    if dialect == "sqlite":
        return sqlite_insert(model)
    raise NotImplementedError(f"the knowledge base supports PostgreSQL and SQLite, not {dialect}")


def read_workload_source(trajectory: Trajectory, given: str | None = None) -> str | None:
    """The workload's source if it is given or still on disk unchanged (same sha256)."""
    if given is not None:
        return given
    try:
        with open(trajectory.job.workload, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    if trajectory.workload_sha256 and hashlib.sha256(text.encode()).hexdigest() != trajectory.workload_sha256:
        return None
    return text


def ingest(session: Session, trajectory: Trajectory, *, workload_source: str | None = None) -> IngestReport:
    """Record one finished job's kernels, strategy evidence and failures, and commit.

    Everything lands in one transaction, or nothing does (the session is rolled back on error).
    A job already ingested is left as it is and ``ingested`` is False.
    """
    if trajectory.state not in FINISHED_STATES:
        raise ValueError(f"job {job_key(trajectory)} is {trajectory.state}; only finished jobs are ingested")
    try:
        report = _ingest(session, trajectory, read_workload_source(trajectory, workload_source))
        if report.ingested:
            session.commit()
        else:
            session.rollback()
    except BaseException:
        session.rollback()
        raise
    return report


def _ingest(session: Session, traj: Trajectory, source: str | None) -> IngestReport:
    sig = Signature.from_trajectory(traj)
    job_id = job_key(traj)
    best = traj.best_step
    reference_ms = traj.baseline.reference_ms if traj.baseline else None
    claimed = session.execute(
        _insert(session, KBJob)
        .values(
            job_id=job_id,
            workload_sha256=traj.workload_sha256,
            workload_name=traj.workload_name,
            family=sig.family,
            world_size=sig.world_size,
            device=sig.device,
            gpu=sig.gpu,
            interconnect=sig.interconnect,
            signature=sig.to_dict(),
            state=traj.state,
            stop_reason=traj.stop_reason,
            strategist=traj.job.strategist,
            steps=len(traj.steps),
            reference_ms=reference_ms,
            best_speedup=traj.best_speedup,
            finished_at=traj.updated_at,
        )
        .on_conflict_do_nothing(index_elements=["job_id"])
        .returning(KBJob.job_id)
    ).scalar_one_or_none()
    if claimed is None:
        return IngestReport(job_id=job_id, ingested=False)

    report = IngestReport(job_id=job_id, ingested=True)
    _record_workload(session, traj, sig, source)
    report.kernels = _record_kernels(session, traj, sig, job_id)
    report.strategies = _record_strategies(session, traj, sig, job_id)
    report.failures = _record_failures(session, traj, sig, job_id)
    return report


def _record_workload(session: Session, traj: Trajectory, sig: Signature, source: str | None) -> None:
    if not traj.workload_sha256:
        return
    values = dict(sha256=traj.workload_sha256, name=traj.workload_name, family=sig.family, source=source)
    stmt = _insert(session, KBWorkload).values(**values)
    if source is None:
        session.execute(stmt.on_conflict_do_nothing(index_elements=["sha256"]))
        return
    table = KBWorkload.__table__
    session.execute(
        stmt.on_conflict_do_update(
            index_elements=["sha256"],
            set_={"source": func.coalesce(table.c.source, stmt.excluded.source)},
        )
    )


def _attributed(session: Session, step: Step) -> tuple[str, dict[str, Any]]:
    """The strategy and params a step's result speaks for. A reused knowledge-base kernel
    (``kb_reuse``) speaks for the strategy that first produced it, so that its wins and losses
    on new workloads count as evidence for that strategy."""
    plan = step.plan
    if plan.strategy == "kb_reuse":
        origin = get_kernel(session, plan.params.get("kernel_id", ""))
        if origin is not None:
            return origin.strategy, {**origin.params, "kb_kernel": origin.public_id}
    return plan.strategy, dict(plan.params)


def kept_steps(traj: Trajectory) -> list[Step]:
    """The steps whose candidates the knowledge base keeps: judged wins (``kb.admission``) that
    beat the baseline, and none at all unless the job's best step is one."""
    best = traj.best_step
    sha = traj.workload_sha256
    bias = traj.self_bias
    if best is None or admission.refusal(best, sha) or not beat_baseline(best, bias):
        return []
    return [s for s in traj.steps if not admission.refusal(s, sha) and beat_baseline(s, bias)]


def _record_kernels(session: Session, traj: Trajectory, sig: Signature, job_id: str) -> int:
    count = 0
    for step in kept_steps(traj):
        speedup = step.speedup
        timing = step.timing
        strategy, params = _attributed(session, step)
        session.add(
            KBKernel(
                job_id=job_id,
                step_index=step.index,
                code=step.candidate_code,
                code_sha256=step.candidate_sha256 or hashlib.sha256(step.candidate_code.encode()).hexdigest(),
                workload_sha256=traj.workload_sha256,
                workload_name=traj.workload_name,
                family=sig.family,
                collectives=" " + " ".join(sig.collectives) + " ",
                world_size=sig.world_size,
                device=sig.device,
                gpu=sig.gpu,
                interconnect=sig.interconnect,
                signature=sig.to_dict(),
                speedup=speedup,
                candidate_ms=timing.candidate_ms,
                reference_ms=timing.reference_ms,
                fraction_of_floor=step.fraction_of_floor,
                evaluation=step.evaluation.to_dict(),
                strategy=strategy,
                params=params,
                plan_source=step.plan.source,
                rationale=step.plan.rationale,
                model=step.usage.model or traj.job.strategist,
                evaluator_version=admission.evaluator_version(step.evaluation),
                tuned=[t.to_dict() for t in step.evaluation.tuned],
            )
        )
        count += 1
    session.flush()
    return count


def _representative(tried: list[tuple[Step, dict[str, Any]]], bias: float) -> tuple[Step, dict[str, Any]]:
    """A strategy's step that speaks for it in a job: its fastest win, else its fastest correct
    step, else its last."""
    for pool in ([t for t in tried if beat_baseline(t[0], bias)], [t for t in tried if t[0].speedup is not None]):
        if pool:
            return max(pool, key=lambda t: (t[0].speedup, -t[0].index))
    return tried[-1]


def _record_strategies(session: Session, traj: Trajectory, sig: Signature, job_id: str) -> int:
    by_name: dict[str, list[tuple[Step, dict[str, Any]]]] = defaultdict(list)
    for step in traj.steps:
        if step.status not in NOT_EVALUATED and step.plan.strategy:
            name, params = _attributed(session, step)
            by_name[name].append((step, params))
    table = KBStrategy.__table__
    # Sorted, so that every transaction locks strategy rows in the same order (no deadlocks).
    for name in sorted(by_name):
        step, params = _representative(by_name[name], traj.self_bias)
        speedup = step.speedup
        won = beat_baseline(step, traj.self_bias)
        size = sig.total_input_bytes or None
        stmt = _insert(session, KBStrategy).values(
            name=name,
            family=sig.family,
            dominant=sig.dominant,
            hardware=sig.hardware,
            min_input_bytes=size if won else None,
            max_input_bytes=size if won else None,
            min_world_size=sig.world_size if won else None,
            max_world_size=sig.world_size if won else None,
            description=step.plan.rationale or f"{name} ({json.dumps(params, sort_keys=True)})",
            best_speedup=speedup if won else None,
            best_params=params if won else {},
            wins=int(won),
            losses=int(not won),
        )
        new = stmt.excluded
        better = and_(new.best_speedup.is_not(None), or_(table.c.best_speedup.is_(None), new.best_speedup > table.c.best_speedup))
        stmt = stmt.on_conflict_do_update(
            index_elements=["name", "family", "dominant", "hardware"],
            set_={
                "wins": table.c.wins + new.wins,
                "losses": table.c.losses + new.losses,
                "min_input_bytes": _widen(table.c.min_input_bytes, new.min_input_bytes, lower=True),
                "max_input_bytes": _widen(table.c.max_input_bytes, new.max_input_bytes, lower=False),
                "min_world_size": _widen(table.c.min_world_size, new.min_world_size, lower=True),
                "max_world_size": _widen(table.c.max_world_size, new.max_world_size, lower=False),
                "best_speedup": case((better, new.best_speedup), else_=table.c.best_speedup),
                "best_params": case((better, new.best_params), else_=table.c.best_params),
                "description": case((better, new.description), else_=table.c.description),
            },
        ).returning(table.c.id)
        strategy_id = session.execute(stmt).scalar_one()
        timing = step.timing
        session.add(
            KBEvidence(
                strategy_id=strategy_id,
                job_id=job_id,
                step_index=step.index,
                tries=len(by_name[name]),
                won=won,
                status=step.status,
                speedup=speedup,
                candidate_ms=step.candidate_ms,
                reference_ms=timing.reference_ms if timing else None,
                fraction_of_floor=step.fraction_of_floor,
                params=params,
                profile_summary=step.profile.summary if step.profile else "",
                profile=step.profile.to_dict() if step.profile else None,
            )
        )
    session.flush()
    return len(by_name)


def _widen(current, new, *, lower: bool):
    """SQL for a range bound that only ever widens: the smaller (or larger) of the two, ignoring NULLs."""
    beyond = new < current if lower else new > current
    return case((new.is_(None), current), (current.is_(None), new), (beyond, new), else_=current)


def _record_failures(session: Session, traj: Trajectory, sig: Signature, job_id: str) -> int:
    grouped: dict[tuple[str, str, str], tuple[Step, int]] = {}
    for step in traj.steps:
        if step.status in ("correct", "skipped"):
            continue
        key = (step.plan.strategy, params_key(step.plan.params), step.status)
        grouped[key] = (step, grouped.get(key, (step, 0))[1] + 1)  # the latest step speaks
    table = KBFailure.__table__
    sig_key = sig.key()
    for (strategy, pkey, status), (step, count) in sorted(grouped.items()):
        stmt = _insert(session, KBFailure).values(
            strategy=strategy,
            params_key=pkey,
            params=step.plan.params,
            signature_key=sig_key,
            signature=sig.to_dict(),
            family=sig.family,
            workload_name=traj.workload_name,
            status=status,
            reason=failure_reason(step),
            count=count,
            first_job_id=job_id,
            last_job_id=job_id,
        )
        session.execute(
            stmt.on_conflict_do_update(
                index_elements=["strategy", "params_key", "signature_key", "status"],
                set_={
                    "count": table.c.count + stmt.excluded.count,
                    "reason": stmt.excluded.reason,
                    "last_job_id": stmt.excluded.last_job_id,
                    "updated_at": utcnow(),
                },
            )
        )
    return len(grouped)
