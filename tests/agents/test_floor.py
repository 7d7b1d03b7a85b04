"""The floor of a workload that states no roofline, from its traced op graph (what KernelBench's
problems are), and the offline planner stopping where the reference already runs at it: one
correct candidate, then the job says why it stops instead of spending its other steps."""

from __future__ import annotations

import pytest
import torch

from agents.analysis import build_analysis
from agents.limits import Budget
from agents.records import JobSpec, Limits, Plan, Step
from agents.roles import PlanningContext
from agents.strategist.catalog import options_for
from agents.strategist.offline import OfflinePlanner
from kloom.evaluation import BaselineResult, EvalResult, TimeStats, TimingRecord
from services.worker.evaluator.tracing import trace_call

H100 = {"gpu": "NVIDIA H100 80GB HBM3"}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    # Planning for a GPU imports the kernel library, and Triton chooses at its first import
    # between compiling and interpreting: on the CPU, interpreting (as kernels/conftest.py does).
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")
N = 1 << 20


class Relu(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


class MatmulTanh(torch.nn.Module):
    def forward(self, a, b):
        return torch.tanh(a @ b)


def _analysis(model, inputs, reference_ms: float, device: str = "cuda"):
    trace = trace_call(model, inputs)
    trace.update(input_shapes=[list(x.shape) for x in inputs], input_dtypes=[str(x.dtype).replace("torch.", "") for x in inputs],
                 input_bytes=sum(x.numel() * x.element_size() for x in inputs), param_bytes=0, mutated_inputs=[], roofline=None)
    baseline = BaselineResult(status="correct", workload="w.py", world_size=1, device=device, reference_ms=reference_ms,
                              environment=dict(H100) if device == "cuda" else {})
    return build_analysis([trace], family="single_gpu", world_size=1, device=device, baseline=baseline)


def test_the_least_traffic_and_the_products_work_of_a_traced_step():
    relu = _analysis(Relu(), [torch.randn(N)], 1.0)
    assert relu.op_graph.least_traffic() == 2 * 4 * N  # read once, written once
    assert relu.floor_from == "trace" and relu.dominant is None  # a traced floor steers no priors
    assert relu.roofline_terms["hbm_ms"] > relu.roofline_terms["compute_ms"] == 0
    assert relu.floor_ms == pytest.approx(2 * 4 * N / 3000e9 * 1e3)  # the H100 profile's measured HBM figure
    gemm = _analysis(MatmulTanh(), [torch.randn(256, 128), torch.randn(128, 64)], 1.0)
    assert sum(gemm.op_graph.node_flops(n) for n in gemm.op_graph.nodes) == 2 * 256 * 128 * 64
    assert gemm.op_graph.least_traffic() == 4 * (256 * 128 + 128 * 64 + 256 * 64)  # the product's result stays on chip
    assert gemm.roofline_terms["flops"] == 2 * 256 * 128 * 64
    # On the CPU the profile is a guess: no floor.
    assert _analysis(Relu(), [torch.randn(N)], 1.0, device="cpu").floor_ms is None



class Conv(torch.nn.Module):
    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x):
        return self.conv(x)


def _landing_pairs(conv, shape) -> int:
    """(output, tap) pairs of one channel that read inside the input, counted by convolving ones."""
    one = type(conv)(1, 1, conv.kernel_size, conv.stride, conv.padding, dilation=conv.dilation, bias=False,
                     **({"output_padding": conv.output_padding} if conv.transposed else {}))
    torch.nn.init.ones_(one.weight)
    with torch.no_grad():
        return int(one(torch.ones(1, 1, *shape)).sum().item())


@pytest.mark.parametrize("conv,shape", [
    (torch.nn.Conv2d(4, 6, 3), (9, 11)),
    (torch.nn.Conv2d(4, 6, (3, 5), stride=2, padding=(1, 2), dilation=(2, 1), groups=2), (13, 10)),
    (torch.nn.Conv1d(3, 5, 7, padding=3), (20,)),
    (torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1), (7, 5)),
    (torch.nn.ConvTranspose3d(4, 2, (3, 2, 3), stride=(2, 1, 3), padding=(1, 0, 2), dilation=(1, 2, 1), groups=2), (4, 5, 3)),
])
def test_a_convolutions_work_counts_the_products_that_land(conv, shape):
    """A tap in the padding, or a transposed convolution's contribution to a cropped output, is no
    work: counting every output times every tap put a strided transposed convolution's floor above
    the time cuDNN took."""
    batch, groups = 2, conv.groups
    graph = _analysis(Conv(conv), [torch.randn(batch, conv.in_channels, *shape)], 1.0).op_graph
    (node,) = [n for n in graph.nodes if n.op == "aten::convolution"]
    expected = 2 * batch * conv.out_channels * (conv.in_channels // groups) * _landing_pairs(conv, shape)
    assert graph.node_flops(node) == expected

def _ctx(analysis, steps: list[Step]) -> PlanningContext:
    spec = JobSpec(workload="w.py", world_size=1, device="cuda", limits=Limits(max_iters=4), use_kb=False, profile="none")
    return PlanningContext(spec=spec, workload_source="", workload_name="w", analysis=analysis, baseline=None, history=steps,
                           budget=Budget(spec.limits, steps_done=len(steps)))


def _correct_step(speedup: float) -> Step:
    times = [TimeStats(median_ms=1.0, mean_ms=1.0, min_ms=1.0, max_ms=1.0, p10_ms=1.0, p90_ms=1.0, stdev_ms=0.0, iters=10)]
    timing = TimingRecord(reference=times, candidate=times, reference_ms=speedup, candidate_ms=1.0, speedup=speedup)
    evaluation = EvalResult(status="correct", workload="w.py", world_size=1, device="cuda", correct=True, compiled=True, timing=timing)
    return Step(index=0, plan=Plan(strategy="cuda_graph"), status="correct", evaluation=evaluation)


def test_a_reference_at_its_floor_stops_the_search_after_one_correct_candidate():
    floor = 2 * 4 * N / 3000e9 * 1e3
    at_floor = _analysis(Relu(), [torch.randn(N)], floor / 0.97)
    planner = OfflinePlanner()
    first, _ = planner.plan(_ctx(at_floor, []))
    assert first is not None  # one candidate runs: the job needs a correct kernel to stand on
    plan, _ = planner.plan(_ctx(at_floor, [_correct_step(0.99)]))
    assert plan is None and "97% of its roofline floor" in planner.done_reason and "hbm-bound" in planner.done_reason
    # Three times its floor: the search goes on.
    slow = _analysis(Relu(), [torch.randn(N)], 3 * floor)
    assert planner.plan(_ctx(slow, [_correct_step(0.99)]))[0] is not None


def test_a_cuda_graph_is_offered_only_where_its_copies_cost_less_than_the_launches_it_saves():
    """A replayed graph copies each call's inputs in and outputs out: on 6 GiB elementwise
    problems it ran at half the reference's speed."""
    from agents.strategist.catalog import options_for

    def offered(n: int) -> set[str]:
        return {o.strategy for o in options_for(_analysis(Relu(), [torch.randn(n)], 1.0))}

    assert "cuda_graph" in offered(1 << 8)  # 2 KiB moved: far less than a launch
    assert "cuda_graph" not in offered(1 << 22)  # 64 MiB copied (about 22 us at 3 TB/s) for one launch saved (8 us)


class GroupNorm(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.group_norm(x, 4)


def test_a_lone_normalisation_is_offered_to_inductor_and_a_lone_pointwise_op_is_not():
    """A single operator gives inductor nothing to fuse, but a normalisation or reduction it lowers
    to passes of its own (KernelBench's GroupNorm: 1.00x with only the reference tried, 1.30x
    compiled); a lone pointwise operator compiles to the same work."""
    norm = _analysis(GroupNorm(), [torch.randn(8, 16, 32)], 1.0, device="cpu")
    assert norm.ops == ["aten::native_group_norm"]
    assert "torch_compile" in [o.strategy for o in options_for(norm)]
    relu = _analysis(Relu(), [torch.randn(N)], 1.0, device="cpu")
    assert "torch_compile" not in [o.strategy for o in options_for(relu)]


class Pool(torch.nn.Module):
    def __init__(self, pool: torch.nn.Module):
        super().__init__()
        self.pool = pool

    def forward(self, x):
        return self.pool(x)


@pytest.mark.parametrize("pool, shape", [
    (torch.nn.MaxPool1d(8, stride=1, padding=4, dilation=3), (4, 8, 128)),
    (torch.nn.AvgPool2d(3, stride=1, padding=1), (2, 4, 16, 16)),
    (torch.nn.MaxPool3d(3, stride=2), (1, 2, 8, 8, 8)),
])  # fmt: skip
def test_a_lone_pooling_is_offered_to_inductor(pool, shape):
    """Pooling is a reduction over each window, which inductor lowers to its own kernel
    (KernelBench's dilated 1-D max pooling: 10.9 ms eager, 2.8 ms compiled on an H200, where the
    offline strategist offered only the reference)."""
    a = _analysis(Pool(pool), [torch.randn(*shape)], 1.0, device="cpu")
    assert any("pool" in op for op in a.ops), a.ops
    assert "torch_compile" in [o.strategy for o in options_for(a)]
