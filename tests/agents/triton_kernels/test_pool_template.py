"""The pooling template on a traced reference: what it claims once its kind is measured winning,
what it leaves (unmeasured, indices read), and a candidate the real evaluator judges correct."""

from __future__ import annotations

import shutil

from kernel_helpers import WORKLOADS, traced

from agents.strategist.triton_kernels import plan as kernel_plan
from agents.strategist.triton_kernels.plan import Measured, find_matches, kernel_candidate
from agents.strategist.triton_kernels.t_pool import POOL_MAX_TAPS

WON = {"pool": Measured("pool", 2.0, True, 2.5, "H100")}


def test_pools_are_claimed_with_their_chains_only_once_measured_winning(interpret):
    from kernels.pool.kernel import POOL_MAX_TAPS as KERNEL_MAX_TAPS  # lazy: Triton is imported with its interpreter on

    assert POOL_MAX_TAPS == KERNEL_MAX_TAPS
    graph = traced("pool_chain")
    pools = [m for m in find_matches(graph, wins=dict(WON)).matches if m.kind == "pool"]
    claimed = sorted(",".join(graph.nodes[i].op.split("::")[1] for i in sorted(m.nodes)) for m in pools)
    assert claimed == ["avg_pool3d,sub", "max_pool2d_with_indices,relu,mul", "max_pool2d_with_indices,squeeze,squeeze,sigmoid"]
    assert any("max pool [3, 3]" in m.rationale for m in pools) and any("avg pool [2, 3, 3]" in m.rationale for m in pools)
    assert not any(m.kind == "pool" for m in find_matches(graph, wins={}).matches)  # not measured: PyTorch's
    lost = {"pool": Measured("pool", 0.8, False)}
    assert not any(m.kind == "pool" for m in find_matches(graph, wins=lost).matches)


def test_the_pool_candidate_is_correct_under_the_real_evaluator(interpreted_evaluator, interpret, monkeypatch, tmp_path):
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(WON))
    path = tmp_path / "w.py"
    shutil.copy(WORKLOADS / "pool_chain.py", path)
    code = kernel_candidate(path.read_text(), traced("pool_chain"), ["pool"], "test")
    assert code.count("pool(") >= 3 and "def pool_kernel" in code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    result = interpreted_evaluator.evaluate(path, candidate, world_size=1)
    assert result.status == "correct", (result.status, result.error)


def test_a_window_wider_than_the_kernel_unrolls_is_not_claimed():
    import torch

    from kloom.opgraph import OpGraph
    from services.worker.evaluator.tracing import trace_call

    class Wide(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.avg_pool2d(x, (23, 23))

    graph = OpGraph.from_dict(trace_call(Wide(), [torch.randn(1, 1, 30, 30)])["op_graph"])
    assert not any(m.kind == "pool" for m in find_matches(graph, wins=dict(WON)).matches)
