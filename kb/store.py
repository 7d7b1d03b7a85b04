"""Filling and querying the knowledge base.

``ingest`` turns one finished trajectory into kernels, strategy evidence and failures in one
transaction; a job is ingested once (re-ingesting it changes nothing) and two jobs ingesting at
the same time both land: counters are updated by single ``INSERT .. ON CONFLICT DO UPDATE``
statements, taken in a fixed order so that concurrent transactions cannot deadlock.

``advice`` is what the planner reads before planning: the kernels and strategies of the most
similar workloads, and the failures seen on nearly the same one. ``search``, ``get_kernel`` and
``get_strategy`` serve the CLI and the REST API.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.orm import Session, defer, selectinload

from agents.records import NOT_EVALUATED, Step, Trajectory  # NOT_EVALUATED: neither evidence for nor against
from agents.roles import EXACT_SIMILARITY, FailureHint, KBAdvice, KernelHint, StrategyHint
from kloom.db import utcnow

from .computation import computation_key
from .confidence import weighted_confidence
from .embeddings import Embedder, LexicalEmbedder, cosine, sentence_embedder
from .models import KBEvidence, KBFailure, KBJob, KBKernel, KBStrategy, KBWorkload
from .signature import Signature, similarity

FINISHED_STATES = frozenset({"succeeded", "failed", "cancelled", "stopped"})
#: A candidate beats its baseline when its speedup clears the timing noise: by at least this much,
#: and by more than the reference's own time drifted between its timings before and after the
#: candidate's (on a busy machine a copy of the reference can measure 1.4x).
MIN_GAIN = 0.02
#: Evidence from workloads less similar than this is not used for advice.
MIN_SIMILARITY = 0.5
#: Failures are only worth avoiding on nearly the same workload.
FAILURE_SIMILARITY = 0.8
#: Jobs of the same computation on the same hardware at most this far apart in input bytes and in
#: world size are on *nearly this workload*: what an option measured there is what it would measure
#: here, so the planner does not evaluate it again where it measured slower than the job's best.
CLOSE_SIZE_RATIO = 4
CLOSE_WORLD_RATIO = 2
#: A kernel written for another computation is an example to learn from, not a drop-in: its
#: similarity is scaled by this (below the offline planner's threshold for verbatim reuse).
OTHER_COMPUTATION_FACTOR = 0.5
_REASON_CHARS = 300


@dataclass
class IngestReport:
    job_id: str
    ingested: bool  # False when the job was already in the knowledge base (nothing changed)
    kernels: int = 0
    strategies: int = 0
    failures: int = 0


@dataclass
class KernelMatch:
    kernel: KBKernel
    score: float


# Ingesting -------------------------------------------------------------------------------------
def job_key(trajectory: Trajectory) -> str:
    """The job's id, or (for a CLI run without one) a digest of what identifies the run."""
    if trajectory.job.job_id:
        return trajectory.job.job_id
    raw = f"{trajectory.workload_sha256}|{trajectory.job.world_size}|{trajectory.job.device}|{trajectory.created_at}"
    return "local-" + hashlib.sha256(raw.encode()).hexdigest()[:24]


def beat_baseline(step: Step) -> bool:
    """Whether a step's candidate was correct and measurably faster than the reference. The
    reference run as a candidate (``reference_copy``) never is: its speedup measures noise."""
    speedup = step.speedup
    if speedup is None or step.plan.strategy == "reference_copy":
        return False
    timing = step.evaluation["timing"]
    margin = MIN_GAIN
    after = timing.get("reference_after")
    if after and timing.get("reference_ms"):
        again = max(t["median_ms"] for t in after)
        margin = max(margin, abs(again / timing["reference_ms"] - 1))
    return speedup > 1 + margin


def params_key(params: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(params or {}, sort_keys=True, default=str).encode()).hexdigest()[:32]


def failure_reason(step: Step) -> str:
    """Why a step failed, in one short line: its error, else the evaluator's message."""
    evaluation = step.evaluation or {}
    mismatch = next(
        (c.get("message") for t in evaluation.get("trials") or [] for c in t.get("ranks") or [] if not c.get("ok")),
        "",
    )
    text = step.error or (evaluation.get("error") or {}).get("message") or mismatch or step.feedback or step.status
    first = next((line.strip() for line in str(text).splitlines() if line.strip()), step.status)
    return first[:_REASON_CHARS]


def _insert(session: Session, model):
    """The dialect's INSERT, which has ``on_conflict_do_*`` on PostgreSQL and SQLite alike."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise NotImplementedError(f"the knowledge base supports PostgreSQL and SQLite, not {dialect}")
    return insert(model)


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
    reference_ms = (traj.baseline or {}).get("reference_ms")
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


def _record_kernels(session: Session, traj: Trajectory, sig: Signature, job_id: str) -> int:
    count = 0
    for step in traj.steps:
        speedup = step.speedup
        if not beat_baseline(step) or not step.candidate_code:
            continue
        timing = step.evaluation["timing"]
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
                candidate_ms=timing["candidate_ms"],
                reference_ms=timing["reference_ms"],
                fraction_of_floor=step.fraction_of_floor,
                evaluation=step.evaluation,
                strategy=strategy,
                params=params,
                plan_source=step.plan.source,
                rationale=step.plan.rationale,
                model=step.usage.model or traj.job.strategist,
            )
        )
        count += 1
    session.flush()
    return count


def _profile_summary(profile: dict[str, Any] | None) -> str:
    summary = (profile or {}).get("summary")
    if summary is None:
        return ""
    return summary if isinstance(summary, str) else json.dumps(summary, sort_keys=True, default=str)


def _representative(tried: list[tuple[Step, dict[str, Any]]]) -> tuple[Step, dict[str, Any]]:
    """A strategy's step that speaks for it in a job: its fastest win, else its fastest correct
    step, else its last."""
    for pool in ([t for t in tried if beat_baseline(t[0])], [t for t in tried if t[0].speedup is not None]):
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
        step, params = _representative(by_name[name])
        speedup = step.speedup
        won = beat_baseline(step)
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
        timing = (step.evaluation or {}).get("timing") or {}
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
                reference_ms=timing.get("reference_ms"),
                fraction_of_floor=step.fraction_of_floor,
                params=params,
                profile_summary=_profile_summary(step.profile),
                profile=step.profile,
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


# Advice for the planner --------------------------------------------------------------------------
def _similar_jobs(session: Session, query: Signature, min_similarity: float) -> dict[str, float]:
    """Similarity of every ingested job's workload to the query, for those at least ``min_similarity``."""
    rows = session.execute(select(KBJob.job_id, KBJob.signature)).all()
    scores = {job_id: similarity(query, Signature.from_dict(signature)).score for job_id, signature in rows}
    return {job_id: s for job_id, s in scores.items() if s >= min_similarity}


def advice(
    session: Session,
    analysis: dict[str, Any] | None,
    workload_sha256: str,
    device: str,
    gpu: str = "",
    *,
    workload_source: str | None = None,
    kernels: int = 5,
    strategies: int = 16,
    min_similarity: float = MIN_SIMILARITY,
) -> KBAdvice:
    """What the knowledge base offers the planner for a workload (its ``agents.analysis`` dict).

    Kernels come from the most similar workloads first (fastest first among equals, one per
    distinct code); ``same_workload`` marks those recorded on this very workload file (by
    sha256), which the planner still sends through the evaluator. A kernel whose workload states
    another computation than ``workload_source`` (``kb.computation``; unknown without the source,
    unless the sha256 matches) has its similarity scaled by ``OTHER_COMPUTATION_FACTOR``.
    Strategies are ranked by their confidence on this workload: the evidence of each job weighs
    by that job's similarity.
    """
    query = Signature.from_analysis(analysis, device=device, gpu=gpu)
    jobs = _similar_jobs(session, query, min_similarity)
    if not jobs:
        return KBAdvice(failures=_failure_hints(session, query))
    close = _close_jobs(session, query, jobs, workload_sha256, workload_source)
    return KBAdvice(
        kernels=_kernel_hints(session, jobs, close, workload_sha256, workload_source, kernels),
        strategies=_strategy_hints(session, jobs, close, strategies),
        failures=_failure_hints(session, query),
    )


def _close_jobs(
    session: Session, query: Signature, jobs: dict[str, float], workload_sha256: str, workload_source: str | None
) -> dict[str, float]:
    """The jobs on nearly this workload: the same computation (this file, or one whose source
    states the same computation) on the same hardware, at most ``CLOSE_SIZE_RATIO`` apart in input
    bytes and ``CLOSE_WORLD_RATIO`` in world size."""
    query_key = computation_key(workload_source) if workload_source else None
    rows = session.execute(
        select(KBJob.job_id, KBJob.workload_sha256, KBJob.signature, KBWorkload.source)
        .join(KBWorkload, KBWorkload.sha256 == KBJob.workload_sha256, isouter=True)
        .where(KBJob.job_id.in_(list(jobs)))
    ).all()
    close = {}
    for job_id, sha, signature, source in rows:
        same = (workload_sha256 and sha == workload_sha256) or (query_key is not None and source is not None and computation_key(source) == query_key)
        if not same:
            continue
        other = Signature.from_dict(signature)
        sizes = sorted(max(b, 1) for b in (query.total_input_bytes, other.total_input_bytes))
        worlds = sorted(max(w, 1) for w in (query.world_size, other.world_size))
        if other.hardware == query.hardware and sizes[1] <= CLOSE_SIZE_RATIO * sizes[0] and worlds[1] <= CLOSE_WORLD_RATIO * worlds[0]:
            close[job_id] = jobs[job_id]
    return close


def _kernel_hints(
    session: Session, jobs: dict[str, float], close: dict[str, float], workload_sha256: str, workload_source: str | None, limit: int
) -> list[KernelHint]:
    rows = session.scalars(
        select(KBKernel).where(KBKernel.job_id.in_(list(jobs))).options(defer(KBKernel.evaluation))
    ).all()
    query_key = computation_key(workload_source) if workload_source else None
    sources = dict(
        session.execute(
            select(KBWorkload.sha256, KBWorkload.source).where(KBWorkload.sha256.in_({k.workload_sha256 for k in rows}))
        ).all()
    )

    def same_computation(k: KBKernel) -> bool:
        if workload_sha256 and k.workload_sha256 == workload_sha256:
            return True
        source = sources.get(k.workload_sha256)
        return query_key is not None and source is not None and computation_key(source) == query_key

    sims = {k.id: jobs[k.job_id] * (1.0 if same_computation(k) else OTHER_COMPUTATION_FACTOR) for k in rows}
    ranked = sorted(rows, key=lambda k: (k.workload_sha256 != workload_sha256, -round(sims[k.id], 2), -k.speedup, k.id))
    hints, seen = [], set()
    for k in ranked:
        if k.code_sha256 in seen:
            continue
        seen.add(k.code_sha256)
        hints.append(
            KernelHint(
                kernel_id=k.public_id,
                code=k.code,
                strategy=k.strategy,
                params=dict(k.params or {}),
                speedup=k.speedup,
                workload_name=k.workload_name,
                similarity=round(sims[k.id], 6),
                same_workload=bool(workload_sha256) and k.workload_sha256 == workload_sha256,
                close=k.job_id in close,
                exact=close.get(k.job_id, 0.0) >= EXACT_SIMILARITY,
            )
        )
        if len(hints) >= limit:
            break
    return hints


def _evidence_line(e: KBEvidence, sim: float) -> str:
    if e.won:
        line = f"won {e.speedup:.2f}x ({e.candidate_ms:.3g} ms vs {e.reference_ms:.3g} ms)"
    elif e.speedup is not None:
        line = f"lost: {e.speedup:.2f}x"
    else:
        line = f"lost: {e.status}"
    if e.fraction_of_floor is not None:
        line += f", {100 * e.fraction_of_floor:.0f}% of roofline"
    head = f"{e.job.workload_name} (world size {e.job.world_size}, {e.job.gpu or e.job.device}, similarity {sim:.2f}): "
    profile = e.profile_summary.splitlines()[0][:160] if e.profile_summary else ""
    return head + line + (f"; profile: {profile}" if profile else "")


def _strategy_hints(session: Session, jobs: dict[str, float], close: dict[str, float], limit: int) -> list[StrategyHint]:
    rows = session.scalars(
        select(KBEvidence).where(KBEvidence.job_id.in_(list(jobs))).options(selectinload(KBEvidence.strategy))
    ).all()
    by_strategy: dict[int, list[KBEvidence]] = defaultdict(list)
    by_name: dict[str, list[KBEvidence]] = defaultdict(list)
    for e in rows:
        by_strategy[e.strategy_id].append(e)
        by_name[e.strategy.name].append(e)
    exact = {job: sim for job, sim in close.items() if sim >= EXACT_SIMILARITY}
    scored = []
    for evidence in by_strategy.values():
        strategy = evidence[0].strategy
        confidence = weighted_confidence((e.won, jobs[e.job_id]) for e in evidence)
        wins = [e for e in evidence if e.won]
        speedups = [math.log(e.speedup) for e in wins]
        typical = math.exp(sum(speedups) / len(speedups)) if speedups else 0.0
        # Its params where it won on the most similar workload (the fastest among equals).
        lead = max(wins, key=lambda e: (round(jobs[e.job_id], 2), e.speedup, -e.id)) if wins else None
        closest = sorted(evidence, key=lambda e: (-jobs[e.job_id], e.id))[:3]
        measured, weight = _measured_speedup(by_name[strategy.name], jobs)
        close_measured, close_weight = _measured_speedup([e for e in by_name[strategy.name] if e.job_id in close], close)
        exact_measured, exact_weight = _measured_speedup([e for e in by_name[strategy.name] if e.job_id in exact], exact)
        hint = StrategyHint(
            strategy=strategy.name,
            description=strategy.description,
            params=dict(lead.params) if lead else {},
            wins=len(wins),
            losses=len(evidence) - len(wins),
            confidence=confidence,
            evidence="\n".join(_evidence_line(e, jobs[e.job_id]) for e in closest),
            speedup=measured,
            weight=weight,
            close_speedup=close_measured,
            close_weight=close_weight,
            exact_speedup=exact_measured,
            exact_weight=exact_weight,
        )
        scored.append((confidence, typical, -strategy.id, hint))
    scored.sort(key=lambda t: t[:3], reverse=True)
    hints, names = [], set()
    for *_, hint in scored:  # one hint per strategy name: its scope with the best confidence here
        if hint.strategy not in names:
            names.add(hint.strategy)
            hints.append(hint)
    return hints[:limit]


def _measured_speedup(evidence: list[KBEvidence], jobs: dict[str, float]) -> tuple[float | None, float]:
    """A strategy's speedup over the similar jobs where it ran correctly (similarity-weighted
    geometric mean; a reference run as a candidate counts at most 1.0x), and the weight of all its
    evidence, failed runs included."""
    weight = sum(jobs[e.job_id] for e in evidence)
    measured = [
        (math.log(min(e.speedup, 1.0) if e.strategy.name == "reference_copy" else e.speedup), jobs[e.job_id])
        for e in evidence
        if e.speedup and e.speedup > 0
    ]
    if not measured:
        return None, weight
    total = sum(w for _, w in measured)
    return math.exp(sum(v * w for v, w in measured) / total), weight


def _failure_hints(session: Session, query: Signature) -> list[FailureHint]:
    rows = session.scalars(select(KBFailure).where(KBFailure.family == query.family)).all()
    merged: dict[tuple[str, str], FailureHint] = {}
    latest: dict[tuple[str, str], Any] = {}
    for f in rows:
        if similarity(query, Signature.from_dict(f.signature)).score < FAILURE_SIMILARITY:
            continue
        key = (f.strategy, f.params_key)
        if key in merged:
            merged[key].count += f.count
            if (f.updated_at, f.id) > latest[key]:
                merged[key].reason, latest[key] = f"{f.status}: {f.reason}", (f.updated_at, f.id)
        else:
            merged[key] = FailureHint(strategy=f.strategy, params=dict(f.params or {}), reason=f"{f.status}: {f.reason}", count=f.count)
            latest[key] = (f.updated_at, f.id)
    return sorted(merged.values(), key=lambda h: (-h.count, h.strategy, json.dumps(h.params, sort_keys=True)))


# Search and lookup -------------------------------------------------------------------------------
def kernel_text(kernel: KBKernel) -> str:
    """What text search matches a kernel on: its workload, strategy, structure and rationale."""
    sig = Signature.from_dict(kernel.signature)
    return " ".join([kernel.workload_name, kernel.strategy, sig.text(), kernel.rationale])


def search(
    session: Session,
    text: str | None = None,
    family: str | None = None,
    collective: str | None = None,
    limit: int = 20,
    *,
    embedder: Embedder | None = None,
) -> list[KernelMatch]:
    """Kernels that match: by family and collective exactly, by ``text`` ranked by relevance
    (the local sentence model when one is installed, else word overlap); without text, the
    fastest first. Ties are broken by id, so that equal databases give equal answers."""
    stmt = select(KBKernel).options(defer(KBKernel.evaluation))  # the full records stay on disk until asked for
    if family:
        stmt = stmt.where(KBKernel.family == family)
    if collective:
        stmt = stmt.where(KBKernel.collectives.like(f"% {collective} %"))
    if not text:
        rows = session.scalars(stmt.order_by(KBKernel.speedup.desc(), KBKernel.id).limit(limit)).all()
        return [KernelMatch(k, k.speedup) for k in rows]
    rows = session.scalars(stmt.order_by(KBKernel.id)).all()
    if not rows:
        return []
    embedder = embedder or sentence_embedder() or LexicalEmbedder()
    query, *docs = embedder.embed([text] + [kernel_text(k) for k in rows])
    scored = [KernelMatch(k, round(cosine(query, d), 6)) for k, d in zip(rows, docs)]
    if not embedder.semantic:
        scored = [m for m in scored if m.score > 0]  # no shared word: no match
    scored.sort(key=lambda m: (-m.score, -m.kernel.speedup, m.kernel.id))
    return scored[:limit]


def parse_id(public_id: str | int, prefix: str) -> int | None:
    """``k12``, ``12`` or 12 -> 12 (for kernels; ``s`` for strategies); None if malformed."""
    text = str(public_id).strip().lower()
    if text.startswith(prefix):
        text = text[len(prefix):]
    # ASCII digits only ("²" is a digit to str.isdigit), and within the id column's range.
    if not (text.isascii() and text.isdigit()) or int(text) >= 2**31:
        return None
    return int(text)


def get_kernel(session: Session, kernel_id: str | int) -> KBKernel | None:
    key = parse_id(kernel_id, "k")
    return session.get(KBKernel, key) if key is not None else None


def get_workload(session: Session, sha256: str) -> KBWorkload | None:
    return session.get(KBWorkload, sha256)


def get_strategy(session: Session, strategy_id: str | int) -> KBStrategy | None:
    key = parse_id(strategy_id, "s")
    if key is None:
        return None
    return session.scalars(
        select(KBStrategy).where(KBStrategy.id == key).options(selectinload(KBStrategy.evidence))
    ).one_or_none()


def list_strategies(session: Session, family: str | None = None, name: str | None = None, limit: int = 50) -> list[KBStrategy]:
    """Strategies by number of wins, then fewest losses."""
    stmt = select(KBStrategy)
    if family:
        stmt = stmt.where(KBStrategy.family == family)
    if name:
        stmt = stmt.where(KBStrategy.name == name)
    stmt = stmt.order_by(KBStrategy.wins.desc(), KBStrategy.losses, KBStrategy.id).limit(limit)
    return list(session.scalars(stmt).all())
