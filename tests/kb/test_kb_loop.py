"""The knowledge base inside the real optimization loop: a kept kernel becomes the next job's first
candidate (evaluated like any other), and the finished job lands in the knowledge base."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select, text

from agents.loop import run_job
from agents.sinks import FileSink
from agents.records import JobSpec, Limits, Plan, Step
from kb.adapter import KnowledgeBaseAdapter
from kb.models import KBEvidence, KBJob, KBKernel, KBStrategy
from kb.ingest import beat_baseline
from services.worker.evaluator import EvalSettings, Evaluator

DATA = Path(__file__).with_name("data")


@pytest.mark.slow
def test_a_kept_kernel_is_the_next_jobs_first_candidate(sqlite_db, tmp_path):
    workload = tmp_path / "tp_gather_linear.py"
    shutil.copy(DATA / "tp_gather_linear.py", workload)
    kernel = DATA / "tp_gather_linear_kernel.py"
    kb = KnowledgeBaseAdapter(sqlite_db.sessions)

    with Evaluator("cpu", EvalSettings.from_env("cpu")) as evaluator:
        # Job 1: the loop times and traces the reference; the kernel is then evaluated for real and
        # recorded as the job's step (as a model would have written it).
        spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=0), job_id="job-1", use_kb=False)
        first = run_job(spec, FileSink(tmp_path / "one"), evaluator=evaluator)
        assert first.analysis and first.baseline
        plan = Plan("collective_substitution", {"gather": "into_tensor", "precision": "input"}, "one all_gather_into_tensor and addmm in the input's precision", "llm")
        for _ in range(3):  # a busy machine can blur a real 2x: measure again, as a person would
            result = evaluator.evaluate(workload, kernel, world_size=2)
            step = Step(0, plan, result.status, kernel.read_text(), result.candidate_sha256, result)
            if beat_baseline(step):
                break
        assert beat_baseline(step), result.summary()
        first.steps.append(step)
        first.state = "succeeded"
        assert kb.ingest(first).kernels == 1

        # Job 2, with the real offline planner and the knowledge base.
        spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=1), job_id="job-2")
        second = run_job(spec, FileSink(tmp_path / "two"), evaluator=evaluator, kb=kb)

    with sqlite_db.sessions() as s:
        kept = s.scalars(select(KBKernel).where(KBKernel.job_id == "job-1")).one()
        step = second.steps[0]
        assert (step.plan.strategy, step.plan.params, step.plan.source) == ("kb_reuse", {"kernel_id": kept.public_id}, "kb")
        assert "this workload" in step.plan.rationale  # flagged as recorded on the same workload file
        assert step.status == "correct" and step.candidate_code == kept.code
        assert s.get(KBJob, "job-2") is not None  # the loop ingested the finished job
        strategy = s.scalars(select(KBStrategy).where(KBStrategy.name == "collective_substitution")).one()
        assert sorted(e.job_id for e in s.scalars(select(KBEvidence).where(KBEvidence.strategy_id == strategy.id))) == ["job-1", "job-2"]


@pytest.mark.slow
def test_a_knowledge_base_that_cannot_answer_is_said_and_the_job_goes_on(sqlite_db, tmp_path, caplog):
    """A broken knowledge base (here a table gone from its database) neither stops the job nor
    goes unnoticed: the job plans without it, ends with a correct kernel, and the log says why;
    the failed ingest at its end is said too."""
    workload = tmp_path / "tp_gather_linear.py"
    shutil.copy(DATA / "tp_gather_linear.py", workload)
    with sqlite_db.sessions() as s:
        s.execute(text("DROP TABLE kb_jobs"))
        s.commit()
    spec = JobSpec(workload=str(workload), world_size=2, limits=Limits(max_iters=1), job_id="job-b")
    with caplog.at_level(logging.WARNING, logger="agents.loop"), Evaluator("cpu", EvalSettings.from_env("cpu")) as evaluator:
        traj = run_job(spec, FileSink(tmp_path / "b"), evaluator=evaluator, kb=KnowledgeBaseAdapter(sqlite_db.sessions))
    assert traj.state == "succeeded" and traj.best_step is not None
    said = [r.getMessage() for r in caplog.records]
    assert any("job-b plans without the knowledge base" in m and "kb_jobs" in m for m in said), said
    assert any("could not record job job-b in the knowledge base" in m for m in said), said
