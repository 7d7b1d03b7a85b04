"""The planner's work grows with the network, not with its square: a deep network (ResNet-101 has
over a hundred batch norms, DenseNet-201 two hundred) is planned inside a job's first seconds.
Counted in calls of the chain builder (``chains.follow``), not in seconds: a count does not
depend on the machine's load."""

from __future__ import annotations

import torch
import torch.nn as nn

from agents.strategist.triton_kernels import chains, plan, t_common, t_elementwise, t_gemm
from agents.strategist.triton_kernels.plan import find_matches
from kloom.opgraph import OpGraph
from services.worker.evaluator.tracing import trace_call


def _stack(blocks: int) -> OpGraph:
    """``blocks`` convolution, batch norm (training), in-place ReLU and residual add blocks."""

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.bn = nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4)

        def forward(self, x):
            y = torch.relu_(self.bn(self.conv(x)))
            y += x
            return y

    torch.manual_seed(0)
    model = nn.Sequential(*(Block() for _ in range(blocks)))
    return OpGraph.from_dict(trace_call(model, [torch.randn(2, 4, 6, 6)])["op_graph"])


def _follows(graph: OpGraph, monkeypatch) -> tuple[int, int]:
    """Calls of ``chains.follow`` while planning ``graph`` with every kind, and regions found."""
    calls = 0
    real = chains.follow

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    for module in (chains, t_common, t_elementwise, t_gemm):  # every module that calls it
        monkeypatch.setattr(module, "follow", counted)
    everything = frozenset(t.kind for t in plan.ordered(None))
    found = find_matches(graph, wins={}, force=everything)
    return calls, len(found.matches)


def test_planning_work_grows_linearly_with_the_depth(monkeypatch):
    small_calls, small_regions = _follows(_stack(8), monkeypatch)
    large_calls, large_regions = _follows(_stack(32), monkeypatch)
    assert large_regions >= 4 * small_regions - 4  # the same plan per block
    # Four times the blocks: about four times the chains tried (before, each round rebuilt every
    # batch norm's match and its epilogue chain: sixteen times).
    assert large_calls <= 5 * small_calls, (small_calls, large_calls)
