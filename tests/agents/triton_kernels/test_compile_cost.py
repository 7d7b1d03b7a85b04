"""A kernel candidate's first-call compilation, estimated from its regions' shapes: a network of
repeated blocks compiles each kernel once, one whose layers all differ in width (DenseNet's dense
blocks) compiles one per region; a job that cannot wait for it tries other options first."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn as nn
from agent_helpers import planning_context

from agents.limits import Budget
from agents.records import Limits
from agents.strategist import OfflinePlanner
from agents.strategist.offline import SETUP_SHARE, SLOW_SETUP_S, behind_slow_setup
from agents.strategist.options import Option
from agents.strategist.triton_kernels import plan
from agents.strategist.triton_kernels.compile_cost import COMPILE_S, compile_cost
from agents.strategist.triton_kernels.plan import find_matches
from kloom.opgraph import OpGraph
from services.worker.evaluator.tracing import trace_call


class _Layer(nn.Module):
    """Batch norm, ReLU and a 1x1 convolution; its output joins its input (``dense``) or is
    added to it (a residual block of fixed width)."""

    def __init__(self, width: int, growth: int, dense: bool):
        super().__init__()
        self.dense = dense
        self.bn, self.conv = nn.BatchNorm2d(width), nn.Conv2d(width, growth if dense else width, 1, bias=False)

    def forward(self, x):
        y = self.conv(torch.relu(self.bn(x)))
        return torch.cat([x, y], 1) if self.dense else x + y


def _graph(layers: int, dense: bool) -> OpGraph:
    torch.manual_seed(0)
    width, growth, blocks = 8, 4, []
    for _ in range(layers):
        blocks.append(_Layer(width, growth, dense))
        width += growth if dense else 0
    return OpGraph.from_dict(trace_call(nn.Sequential(*blocks), [torch.randn(2, 8, 4, 4)])["op_graph"])


def _cost(graph: OpGraph):
    everything = frozenset(t.kind for t in plan.ordered(None))
    return compile_cost(graph, find_matches(graph, wins={}, force=everything).matches)


def test_repeated_blocks_compile_once_and_layers_of_growing_width_each_once():
    same, dense = _cost(_graph(12, dense=False)), _cost(_graph(12, dense=True))
    assert same.regions >= 12 and dense.regions >= 12
    # Twelve blocks of one shape: the first block's kernels, and the rest found compiled (at
    # most the first and last differ in what reads their output).
    assert same.kernels <= _cost(_graph(1, dense=False)).kernels + 2, same
    # Every dense layer reads more channels than the one before: nothing is shared.
    assert dense.kernels == dense.regions, dense
    assert dense.seconds >= dense.kernels * 3 * COMPILE_S  # at least three configurations each
    assert "distinct kernel instantiation(s)" in dense.note()


def _option(name: str, setup_s: float = 0.0) -> Option:
    return Option(name, {"n": name}, 1.0, name, setup_s=setup_s)


def test_a_candidate_that_would_compile_past_the_jobs_time_goes_after_the_others():
    kernels, compile_, graph = _option("triton_kernels", setup_s=200.0), _option("torch_compile"), _option("cuda_graph")
    ranked = [kernels, compile_, graph]
    # A job with ten minutes left waits for 200 s of compilation; one with five does not.
    assert behind_slow_setup(ranked, 600.0) == (ranked, set(), "")
    order, moved, why = behind_slow_setup(ranked, 300.0)
    assert order == [compile_, graph, kernels] and moved == {kernels.key}
    assert "~200 s" in why and f"{SETUP_SHARE:.0%} of the job's remaining 300 s" in why
    # Without a wall limit only what outlasts half the evaluator's first-call limit moves.
    assert behind_slow_setup(ranked, None) == (ranked, set(), "")
    slower = _option("triton_kernels", setup_s=SLOW_SETUP_S + 1)
    assert behind_slow_setup([slower, compile_], None)[0] == [compile_, slower]
    # Nothing to put first: the order stands.
    assert behind_slow_setup([kernels], 100.0) == ([kernels], set(), "")


def test_the_planner_says_why_the_kernel_candidate_waits(monkeypatch):
    """Through the planner: the job's remaining time moves the slow candidate, and the option
    that took its place says why."""
    kernels, compile_ = _option("triton_kernels", setup_s=200.0), _option("torch_compile")
    monkeypatch.setattr(OfflinePlanner, "_ranked", lambda self, ctx, analysis, tried: [kernels, compile_])
    monkeypatch.setattr(OfflinePlanner, "_duplicate", staticmethod(lambda option, ctx, evaluated: False))
    workload = Path(__file__).resolve().parents[2] / "evaluator" / "workloads" / "deep_bn_mlp.py"

    class _Analysis:
        device, floor_ms, reference_ms, dominant = "cuda", None, None, None

    ctx = planning_context(workload, _Analysis())
    ctx.budget = Budget(Limits(max_iters=4, max_wall_s=240.0))
    plan_, _ = OfflinePlanner().plan(ctx)
    assert plan_.strategy == "torch_compile" and "compile for ~200 s before computing anything" in plan_.rationale
    ctx.budget = Budget(Limits(max_iters=4, max_wall_s=3600.0))
    assert OfflinePlanner().plan(ctx)[0].strategy == "triton_kernels"
