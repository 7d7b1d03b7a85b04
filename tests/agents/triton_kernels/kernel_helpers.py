"""Helpers of the kernel strategy tests (imported by name: conftest.py puts this folder on the path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from kloom.opgraph import OpGraph
from services.worker.evaluator.tracing import trace_call

WORKLOADS = Path(__file__).resolve().parent / "workloads"


def load_workload(name: str):
    path = WORKLOADS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_kl_test_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def traced(name: str) -> OpGraph:
    """The op graph of one call of the fixture workload ``name`` (in this process)."""
    module = load_workload(name)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    return OpGraph.from_dict(trace_call(model, module.get_inputs())["op_graph"])


def judged_kernel_candidate(ev, path: Path, tmp_path: Path, kb=None):
    """The offline planner's first plan for ``path`` (traced by the evaluator ``ev`` on the CPU,
    with the knowledge base's advice ``kb``), which must be the kernel strategy's, its candidate
    as the offline coder writes it (within the candidate rules) and the evaluator's verdict on it,
    which must be correct: (plan, code, result)."""
    from agent_helpers import planning_context  # lazy: on the path only once tests/agents' conftest ran

    from agents.analysis import build_analysis
    from agents.strategist import OfflineCoder, OfflinePlanner
    from agents.strategist.triton_kernels.option import STRATEGY
    from kloom.static_check import check_candidate

    traces = ev.analyze(path, world_size=1)
    analysis = build_analysis(traces, family="single_gpu", world_size=1, device="cpu", baseline=None)
    ctx = planning_context(path, analysis)
    if kb is not None:
        ctx.kb = kb
    plan, _ = OfflinePlanner().plan(ctx)
    assert plan.strategy == STRATEGY, plan
    code = OfflineCoder().write(plan, ctx).code
    assert code is not None and check_candidate(code) == []
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    result = ev.evaluate(path, candidate, world_size=1)
    assert result.status == "correct", (result.status, result.error)
    return plan, code, result

