"""Whole networks in KernelBench's format (``Model``, ``get_inputs``, ``get_init_inputs``),
written here in the styles such suites use (residual CNNs, recurrent nets with state held on
the module, transformer blocks, channel shuffles): each goes through the loop as a user's
`kloom optimize` would take it, and every candidate the offline strategist writes for it is
correct. The GPU run of the same files is ``benchmarks/gpu/whole_models.sh``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.loop import run_job
from agents.records import JobSpec, Limits
from agents.sinks import FileSink
from tests import sweeps

MODELS = sorted((Path(__file__).parent / "fixtures" / "whole_models").glob("*.py"))


@pytest.fixture(scope="module")
def fast_evaluator():
    from services.worker.evaluator import EvalSettings, Evaluator

    settings = EvalSettings.for_device("cpu", trials=2, timing_budget_s=0.02, min_iters=2, max_iters=5, warmup_iters=1, recheck_reference=False)
    with Evaluator("cpu", settings) as ev:
        yield ev


#: CI runs every other model's job (``tests/sweeps.py``): 10-60 s each on two cores.
@pytest.mark.parametrize("model", sweeps.params(MODELS, every=2, ids=lambda m: m.stem))
def test_a_whole_model_optimizes_and_every_candidate_is_correct(model, fast_evaluator, tmp_path):
    spec = JobSpec(workload=str(model), world_size=1, device="cpu", shapes="ci", strategist="offline",
                   limits=Limits(max_iters=2), use_kb=False, profile="none")
    traj = run_job(spec, FileSink(tmp_path / "job"), evaluator=fast_evaluator)
    assert traj.state == "succeeded" and traj.best_step is not None, traj.stop_reason
    assert traj.analysis is not None and not traj.analysis.trace_error, traj.analysis.trace_error if traj.analysis else None
    assert traj.steps and all(s.status in ("correct", "skipped") for s in traj.steps), [(s.plan.strategy, s.status, s.error) for s in traj.steps]
