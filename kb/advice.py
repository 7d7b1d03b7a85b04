"""What the planner reads from the knowledge base before planning (``advice``): the kernels and
strategies of the most similar workloads, and the failures seen on nearly the same one."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, defer, selectinload

from agents.analysis import Analysis
from agents.roles import EXACT_SIMILARITY, FailureHint, KBAdvice, KernelHint, StrategyHint
from kloom.speedup import reported_speedup
from kloom.tuning import TunedConfig, merged, parse_tuned

from .computation import computation_key
from .confidence import weighted_confidence
from .models import KBEvidence, KBFailure, KBJob, KBKernel, KBWorkload
from .signature import Signature, similarity

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


def _similar_jobs(session: Session, query: Signature, min_similarity: float) -> dict[str, float]:
    """Similarity of every ingested job's workload to the query, for those at least ``min_similarity``."""
    rows = session.execute(select(KBJob.job_id, KBJob.signature)).all()
    scores = {job_id: similarity(query, Signature.from_dict(signature)).score for job_id, signature in rows}
    return {job_id: s for job_id, s in scores.items() if s >= min_similarity}


def advice(
    session: Session,
    analysis: Analysis | None,
    workload_sha256: str,
    device: str,
    gpu: str = "",
    *,
    workload_source: str | None = None,
    kernels: int = 5,
    strategies: int = 16,
    min_similarity: float = MIN_SIMILARITY,
) -> KBAdvice:
    """What the knowledge base offers the planner for a workload (its traced ``Analysis``).

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
        tuned=_tuned_hints(session, jobs, query),
    )


def _tuned_hints(session: Session, jobs: dict[str, float], query: Signature) -> list[TunedConfig]:
    """The autotuning choices of the kernels kept from similar workloads on this very hardware (a
    configuration the autotuner chose on another card says nothing here), the most similar job's
    first; each kernel and key once."""
    rows = session.execute(
        select(KBKernel.job_id, KBKernel.tuned, KBKernel.speedup)
        .where(KBKernel.job_id.in_(list(jobs)), KBKernel.device == query.device, KBKernel.gpu == query.gpu)
    ).all()
    ranked = sorted(rows, key=lambda r: (-round(jobs[r.job_id], 2), -r.speedup))
    return merged(*(parse_tuned(r.tuned) for r in ranked))


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
        (math.log(reported_speedup(e.speedup, e.strategy.name)), jobs[e.job_id])
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
