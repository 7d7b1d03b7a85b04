"""``kloom kb verify``: judge the kept kernels again with the evaluator as it is now.

A kernel kept by an older evaluator (``evaluator_version``; "1" for the one whose candidates
shared the reference's process and could forge their time) is run again on its workload: one
that still passes (``kb.admission``, and a win over the noise) records the version that judged it
now and when; one that does not is dropped from the knowledge base (search, advice and export
stop offering it; the strategy evidence of its job stays, as a record of what was measured then).
A kernel whose workload's source was not kept cannot be judged again and is left as it is.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from agents.records import Plan, Step
from kloom.clock import utcnow

from . import admission
from .models import KBKernel, KBWorkload
from .ingest import beat_baseline


@dataclass
class Verdict:
    """What verification did to one kernel."""

    kernel_id: str
    workload: str
    world_size: int
    kept_speedup: float
    status: str  # the evaluator's status now, or "unverifiable"
    speedup: float | None
    action: str  # "kept", "dropped", "would drop" (dry run), "left" (not judged again)
    reason: str


def verify(sessions: sessionmaker[Session], evaluator, *, device: str, world_size: int | None = None, dry_run: bool = False) -> list[Verdict]:
    """Judge again every kept kernel of ``device`` (and ``world_size``, if given) with
    ``evaluator`` (an ``Evaluator`` for ``device``); drop those that no longer pass."""
    with sessions() as session:
        stmt = select(KBKernel.id).where(KBKernel.device == device).order_by(KBKernel.id)
        if world_size is not None:
            stmt = stmt.where(KBKernel.world_size == world_size)
        ids = list(session.scalars(stmt))
    verdicts = []
    for kernel_id in ids:
        with sessions() as session:
            verdicts.append(_verify_one(session, session.get(KBKernel, kernel_id), evaluator, dry_run))
    return verdicts


def _verify_one(session: Session, kernel: KBKernel, evaluator, dry_run: bool) -> Verdict:
    source = session.scalar(select(KBWorkload.source).where(KBWorkload.sha256 == kernel.workload_sha256))
    verdict = Verdict(kernel.public_id, kernel.workload_name, kernel.world_size, kernel.speedup, "unverifiable", None, "left", "")
    if source is None:
        verdict.reason = "its workload's source was not kept"
        return verdict
    with tempfile.TemporaryDirectory(prefix="kloom-verify-") as tmp:
        path = Path(tmp) / f"{re.sub(r'[^A-Za-z0-9_]', '_', kernel.workload_name)[:100] or 'workload'}.py"
        path.write_text(source, encoding="utf-8")
        result = evaluator.evaluate(path, candidate_source=kernel.code, world_size=kernel.world_size)
    step = Step(index=kernel.step_index, plan=Plan(strategy=kernel.strategy), status=result.status,
                candidate_code=kernel.code, candidate_sha256=kernel.code_sha256, evaluation=result)
    verdict.status = result.status
    verdict.speedup = result.timing.speedup if result.timing else None
    refused = admission.refusal(step, kernel.workload_sha256)
    if not refused and not beat_baseline(step):
        refused = f"no longer a win ({verdict.speedup:.3f}x)"
    if refused:
        verdict.reason = refused if result.status == "correct" else (result.error.message if result.error else refused)[:300]
        verdict.action = "would drop" if dry_run else "dropped"
        if not dry_run:
            session.delete(kernel)
            session.commit()
        return verdict
    verdict.action, verdict.reason = "kept", f"judged again by evaluator {admission.evaluator_version(result)}"
    if not dry_run:
        kernel.evaluator_version = admission.evaluator_version(result)
        kernel.verified_at = utcnow()
        session.commit()
    return verdict
