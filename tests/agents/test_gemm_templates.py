"""The GEMM and convolution templates on traced references: what they claim, what they are
offered for before and after the GPU benchmark's verdict, and candidates that compute what the
reference does (run on the CPU under the Triton interpreter, and through the real evaluator)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from agents.records import JobSpec, Limits
from agents.strategist.triton_kernels import plan as kernel_plan
from agents.strategist.triton_kernels.plan import WINS_FILE, Measured, find_matches, kernel_candidate, measured_kinds
from kloom.opgraph import OpGraph
from services.worker.evaluator.tracing import trace_call

WON = {k: Measured(k, 1.2, True) for k in ("gemm_fp32", "gemm_lowp", "conv_fp32", "conv_transposed_fp32", "conv_lowp")}
LOST = {k: Measured(k, 0.8, False) for k in WON}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    # Kernel candidates run their Triton kernels on the CPU through the interpreter; the
    # evaluator's ranks inherit the variable.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    torch.manual_seed(0)


@pytest.fixture
def measured_winning(monkeypatch):
    """The GPU benchmark's verdict (``kernels/wins.json``) as if every GEMM/conv kind had won."""
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(WON))


def graph_of(model, inputs) -> OpGraph:
    return OpGraph.from_dict(trace_call(model, inputs)["op_graph"])


class LinearChain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(24, 40)
        self.scale = torch.nn.Parameter(torch.randn(40))

    def forward(self, x):
        return torch.tanh(F.hardtanh(F.gelu(self.linear(x)) * self.scale - 0.5, -1.0, 2.0))


class LinearLogSumExp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(24, 70)

    def forward(self, x):
        return torch.logsumexp(torch.sigmoid(self.linear(x)), dim=1, keepdim=True)


class TriangularProduct(torch.nn.Module):
    def forward(self, a, b):
        return torch.tril(torch.matmul(a, b))


class ConvChain(torch.nn.Module):
    def __init__(self, channels: int = 4, out: int = 6):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, out, 3, padding=1)
        self.bias = torch.nn.Parameter(torch.randn(out, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias


def run_candidate(source: str, model: torch.nn.Module, inputs: list):
    """Execute a candidate file's ``ModelNew`` with the reference module's parameters."""
    namespace: dict = {"Model": type(model)}
    exec(compile(source, "<candidate>", "exec"), namespace)  # the test's own generated code
    new = namespace["ModelNew"].__new__(namespace["ModelNew"])
    torch.nn.Module.__init__(new)
    new.__dict__.update({k: v for k, v in model.__dict__.items() if k != "training"})
    with torch.no_grad():
        return new(*inputs)


def reference_source(cls) -> str:
    import inspect

    return "import torch\nimport torch.nn.functional as F\n\n" + inspect.getsource(cls).replace(f"class {cls.__name__}", "class Model")


def test_a_float32_linear_layer_and_its_chain_become_one_gemm_only_once_measured_winning(measured_winning):
    model, x = LinearChain(), torch.randn(33, 24)
    graph = graph_of(model, [x])
    plan = find_matches(graph, wins={})
    assert not any(m.kind.startswith("gemm") for m in plan.matches)  # unmeasured: cuBLAS is hard to beat in float32
    assert not any(m.kind.startswith("gemm") for m in find_matches(graph, wins=LOST).matches)
    plan = find_matches(graph, wins=WON)
    gemm = next(m for m in plan.matches if m.kind == "gemm_fp32")
    ops = {graph.nodes[i].op for i in gemm.nodes}
    assert {"aten::addmm", "aten::gelu", "aten::mul", "aten::sub", "aten::hardtanh", "aten::tanh"} <= ops
    assert "no TF32" in gemm.rationale and "epilogue op" in gemm.rationale
    source = kernel_candidate(reference_source(LinearChain), graph, ["gemm_fp32_epilogue"], "test")
    assert "gemm(" in source and "def gemm_kernel" in source  # the kernel's own source is embedded
    got = run_candidate(source.replace("class Model(", "class _Reference("), model, [x])
    torch.testing.assert_close(got, model(x), atol=2e-5, rtol=2e-5)


def test_a_row_reduction_after_the_product_is_finished_in_the_tile(measured_winning):
    model, x = LinearLogSumExp(), torch.randn(33, 24)
    graph = graph_of(model, [x])
    gemm = next(m for m in find_matches(graph, wins=WON).matches if m.kind == "gemm_fp32")
    assert gemm.params["finish"] == "reduce='logsumexp'"
    source = kernel_candidate(reference_source(LinearLogSumExp), graph, ["gemm_fp32_epilogue"], "test")
    got = run_candidate(source.replace("class Model(", "class _Reference("), model, [x])
    assert got.shape == (33, 1)
    torch.testing.assert_close(got, model(x), atol=2e-5, rtol=2e-5)


def test_a_triangle_of_a_product_is_offered_before_any_measurement_and_stays_exact():
    model = TriangularProduct()
    a, b = torch.randn(48, 48).tril(), torch.randn(48, 48).tril()
    graph = graph_of(model, [a, b])
    match = next(m for m in find_matches(graph, wins={}).matches if m.kind == "gemm_triangular")
    assert "triangle" in match.rationale and "checked on the device" in match.rationale
    assert match.rationale.endswith("not measured on a GPU yet")
    measured = {"gemm_triangular": Measured("gemm_triangular", 3.93, True, 3.96, "H100")}
    match = next(m for m in find_matches(graph, wins=measured).matches if m.kind == "gemm_triangular")
    assert "measured faster on H100: 3.93x inductor's speed, 3.96x eager's (kernels/wins.json)" in match.rationale
    source = kernel_candidate(reference_source(TriangularProduct), graph, ["gemm_triangular_epilogue"], "test")
    assert "triangular_inputs=True" in source
    run = lambda *xs: run_candidate(source.replace("class Model(", "class _Reference("), model, list(xs))  # noqa: E731
    torch.testing.assert_close(run(a, b), torch.tril(a @ b), atol=2e-5, rtol=2e-5)
    full = torch.randn(48, 48)  # factors that are not triangular: the device check reads all of K
    torch.testing.assert_close(run(full, b), torch.tril(full @ b), atol=2e-5, rtol=2e-5)


def test_a_convolution_and_its_chain_become_one_implicit_gemm_only_once_measured_winning(measured_winning):
    model, x = ConvChain(), torch.randn(2, 4, 9, 9)
    graph = graph_of(model, [x])
    assert not any(m.kind.startswith("conv") for m in find_matches(graph, wins={}).matches)
    conv = next(m for m in find_matches(graph, wins=WON).matches if m.kind == "conv_fp32")
    assert {graph.nodes[i].op for i in conv.nodes} == {"aten::convolution", "aten::relu", "aten::add"}
    assert "measured faster: 1.20x inductor's speed" in conv.rationale
    # A benchmark that forces the kind gets the region, and a rationale that claims no measurement.
    forced = next(m for m in find_matches(graph, wins={}, force=frozenset({"conv_fp32"})).matches if m.kind == "conv_fp32")
    assert "measured faster" not in forced.rationale and "not measured on a GPU: used because the caller asked" in forced.rationale
    lost = next(m for m in find_matches(graph, wins=LOST, force=frozenset({"conv_fp32"})).matches if m.kind == "conv_fp32")
    assert "measured slower: 0.80x inductor's speed" in lost.rationale
    source = kernel_candidate(reference_source(ConvChain), graph, ["conv_fp32_epilogue"], "test")
    got = run_candidate(source.replace("class Model(", "class _Reference("), model, [x])
    torch.testing.assert_close(got, model(x), atol=2e-5, rtol=2e-5)


def test_a_float32_product_split_into_three_tf32_products_is_its_own_kind_and_computes_the_product():
    """``gemm_fp32x3`` claims float32 products before ``gemm_fp32`` when both won; its statement
    asks the kernel for ``precision="tf32x3"`` and says so, and never plain TF32."""
    model, x = LinearChain(), torch.randn(33, 24)
    graph = graph_of(model, [x])
    both = dict(WON, gemm_fp32x3=Measured("gemm_fp32x3", 1.35, True, 1.37, "H100"))
    gemm = next(m for m in find_matches(graph, wins=both).matches if m.kind.startswith("gemm"))
    assert gemm.kind == "gemm_fp32x3" and "three TF32 products" in gemm.rationale and "1.35x inductor's speed" in gemm.rationale
    assert next(m for m in find_matches(graph, wins=WON).matches if m.kind.startswith("gemm")).kind == "gemm_fp32"
    lost = dict(WON, gemm_fp32x3=Measured("gemm_fp32x3", 0.9, False))
    assert next(m for m in find_matches(graph, wins=lost).matches if m.kind.startswith("gemm")).kind == "gemm_fp32"
    source = kernel_candidate(reference_source(LinearChain), graph, ["gemm_fp32x3_epilogue"], "test")
    assert 'precision="tf32x3"' in source and "allow_tf32" not in source.split("class ModelNew")[-1]
    got = run_candidate(source.replace("class Model(", "class _Reference("), model, [x])
    torch.testing.assert_close(got, model(x), atol=2e-5, rtol=2e-5)
    # bfloat16 products are not this kind's.
    low = graph_of(LinearChain().to(torch.bfloat16), [x.to(torch.bfloat16)])
    assert not any(m.kind == "gemm_fp32x3" for m in find_matches(low, wins=both).matches)


def test_the_plan_counts_the_compute_a_faster_product_saves_not_only_the_memory_traffic():
    """A compute-bound float32 product: in full float32 the kernel saves only the epilogue's
    passes over memory; as three TF32 products the roofline also counts the product's time saved
    at the measured rate (``t_gemm.FP32X3_SPEEDUP``), and the plan's share says so."""
    from agents.strategist.triton_kernels.t_gemm import FP32X3_SPEEDUP

    model, x = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU()), torch.randn(1024, 1024)
    graph = graph_of(model, [x])
    ieee = find_matches(graph, wins=WON)
    x3 = find_matches(graph, wins=dict(WON, gemm_fp32x3=Measured("gemm_fp32x3", 1.35, True)))
    product_ms = 2 * 1024**3 / 60e9  # the product alone at the float32 rate the eager estimate uses
    assert x3.saved_ms - ieee.saved_ms == pytest.approx(product_ms * (1 - 1 / FP32X3_SPEEDUP), rel=0.05)
    assert x3.saved_ms / x3.eager_ms > 0.3 > ieee.saved_ms / ieee.eager_ms


def test_a_float32_convolution_walked_tap_by_tap_in_three_tf32_products_is_its_own_kind(monkeypatch):
    """``conv_fp32x3`` claims float32 convolutions before ``conv_fp32`` when it won, calls the
    tap-outer kernel with ``precision="tf32x3"``, computes the reference's result, and leaves
    convolutions with too few channels a group (depthwise) alone."""
    model, x = ConvChain(16), torch.randn(2, 16, 7, 7)
    graph = graph_of(model, [x])
    won = dict(WON, conv_fp32x3=Measured("conv_fp32x3", 1.8, True, 1.9, "H100"))
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(won))
    conv = next(m for m in find_matches(graph, wins=won).matches if m.kind.startswith("conv"))
    assert conv.kind == "conv_fp32x3" and "three TF32 products" in conv.rationale
    assert {graph.nodes[i].op for i in conv.nodes} == {"aten::convolution", "aten::relu", "aten::add"}
    assert next(m for m in find_matches(graph, wins=WON).matches if m.kind.startswith("conv")).kind == "conv_fp32"
    source = kernel_candidate(reference_source(ConvChain), graph, ["conv_fp32x3_epilogue"], "test")
    assert "conv_taps(" in source and 'precision="tf32x3"' in source and "def conv_taps_kernel" in source
    got = run_candidate(source.replace("class Model(", "class _Reference("), model, [x])
    torch.testing.assert_close(got, model(x), atol=2e-5, rtol=2e-5)
    assert "channels_last=True)" not in source
    # A verdict measured with the input made channels-last first is offered that way.
    last = dict(won, conv_fp32x3=Measured("conv_fp32x3", 1.8, True, 1.9, "H100", channels_last=True))
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(last))
    source = kernel_candidate(reference_source(ConvChain), graph, ["conv_fp32x3_epilogue"], "test")
    assert 'precision="tf32x3", channels_last=True)' in source
    torch.testing.assert_close(run_candidate(source.replace("class Model(", "class _Reference("), model, [x]), model(x), atol=2e-5, rtol=2e-5)
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(won))
    # A transposed convolution is the other tap-outer kind, with its stride, padding and output padding.
    up = torch.nn.ConvTranspose2d(16, 6, 4, stride=2, padding=1, output_padding=1)
    up_graph = graph_of(up, [x])
    won_t = dict(won, conv_transposed_fp32x3=Measured("conv_transposed_fp32x3", 1.5, True))
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(won_t))
    match = next(m for m in find_matches(up_graph, wins=won_t).matches if m.kind.startswith("conv"))
    assert match.kind == "conv_transposed_fp32x3" and "split by output phase" in match.rationale
    source = kernel_candidate("import torch\n\nclass Model(torch.nn.ConvTranspose2d):\n    pass\n", up_graph, ["conv_transposed_fp32x3_epilogue"], "test")
    assert "True, [1, 1], 1" in source
    torch.testing.assert_close(run_candidate(source.replace("class Model(", "class _Reference("), up, [x]), up(x), atol=2e-5, rtol=2e-5)
    # Too few input channels a group (a depthwise convolution, or 8 channels, which measured slower
    # than cuDNN) are left to the others.
    for few in (torch.nn.Conv2d(16, 16, 3, groups=16), torch.nn.Conv2d(16, 32, 3, groups=2)):
        assert not any(m.kind == "conv_fp32x3" for m in find_matches(graph_of(few, [x]), wins=won).matches)


def test_a_float32_convolution_with_few_input_channels_folds_its_window_into_one_reduction(monkeypatch):
    """``conv_folded_fp32x3`` claims plain float32 convolutions with fewer than
    ``TAPS_MIN_CHANNELS`` input channels and at least ``FOLDED_MIN_OUT_CHANNELS`` output
    channels a group, once it won, and calls ``folded.py``'s kernel,
    which computes the reference's result; more channels stay the tap-outer kind's, and a
    transposed convolution or a window wider than the kernel unrolls is not claimed."""
    from agents.strategist.triton_kernels import t_gemm
    from kernels.conv import folded

    assert t_gemm.FOLDED_MAX_K == folded.FOLDED_MAX_K
    model, x = ConvChain(3, 16), torch.randn(2, 3, 7, 7)
    graph = graph_of(model, [x])
    won = dict(WON, conv_fp32x3=Measured("conv_fp32x3", 1.8, True), conv_folded_fp32x3=Measured("conv_folded_fp32x3", 2.0, True, 2.1, "H100"))
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(won))
    conv = next(m for m in find_matches(graph, wins=won).matches if m.kind.startswith("conv"))
    assert conv.kind == "conv_folded_fp32x3" and "27-long window" in conv.rationale and "three TF32 products" in conv.rationale
    assert {graph.nodes[i].op for i in conv.nodes} == {"aten::convolution", "aten::relu", "aten::add"}
    source = kernel_candidate(reference_source(ConvChain), graph, ["conv_folded_fp32x3_epilogue"], "test")
    assert "conv_folded(" in source and 'precision="tf32x3"' in source and "def conv_folded_kernel" in source
    torch.testing.assert_close(run_candidate(source.replace("class Model(", "class _Reference("), model, [x]), model(x), atol=2e-5, rtol=2e-5)
    # Not measured yet (or lost): left to cuDNN.
    assert not any(m.kind == "conv_folded_fp32x3" for m in find_matches(graph, wins=dict(WON)).matches)
    lost = dict(won, conv_folded_fp32x3=Measured("conv_folded_fp32x3", 0.9, False))
    assert not any(m.kind == "conv_folded_fp32x3" for m in find_matches(graph, wins=lost).matches)
    # 16 channels are the tap-outer kernel's; a transposed one and a 15 x 7 x 7 window are not folded.
    wide = graph_of(ConvChain(16, 16), [torch.randn(2, 16, 7, 7)])
    assert {m.kind for m in find_matches(wide, wins=won).matches if m.kind.startswith("conv")} == {"conv_fp32x3"}
    # Nor a depthwise one (one output channel a group: its tile's columns would be padding).
    for other, inputs in ((torch.nn.ConvTranspose2d(3, 6, 3), [x]), (torch.nn.Conv2d(15, 4, 7), [torch.randn(1, 15, 9, 9)]),
                          (torch.nn.Conv2d(3, 3, 3, groups=3), [x]), (torch.nn.Conv2d(3, 30, 3, groups=3), [x])):
        assert not any(m.kind == "conv_folded_fp32x3" for m in find_matches(graph_of(other, inputs), wins=won).matches)



class UpsampleChain(torch.nn.Module):
    def __init__(self, channels: int = 3, out: int = 16, groups: int = 1):
        super().__init__()
        self.conv = torch.nn.ConvTranspose2d(channels, out, 3, stride=2, padding=1, output_padding=1, groups=groups)

    def forward(self, x):
        return torch.tanh(self.conv(x)) * 0.5


def test_a_transposed_convolution_with_few_input_channels_folds_each_phase_into_one_reduction(monkeypatch):
    """``conv_transposed_folded_fp32x3`` claims transposed float32 convolutions with fewer than
    ``TAPS_MIN_CHANNELS`` input channels and at least ``FOLDED_MIN_OUT_CHANNELS`` output channels a
    group, once it won, and its candidate computes the reference's result; more input channels stay
    the tap-outer kind's, and a plain convolution or a depthwise transposed one is not claimed."""
    won = dict(WON, conv_transposed_fp32x3=Measured("conv_transposed_fp32x3", 3.0, True),
               conv_folded_fp32x3=Measured("conv_folded_fp32x3", 2.0, True),
               conv_transposed_folded_fp32x3=Measured("conv_transposed_folded_fp32x3", 2.0, True, 2.5, "H100"))
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(won))
    x = torch.randn(2, 3, 5, 6)
    model = UpsampleChain()
    graph = graph_of(model, [x])
    conv = next(m for m in find_matches(graph, wins=won).matches if m.kind.startswith("conv"))
    assert conv.kind == "conv_transposed_folded_fp32x3" and "per output phase" in conv.rationale and "three TF32 products" in conv.rationale
    assert {graph.nodes[i].op for i in conv.nodes} == {"aten::convolution", "aten::tanh", "aten::mul"}
    source = kernel_candidate(reference_source(UpsampleChain), graph, ["conv_transposed_folded_fp32x3_epilogue"], "test")
    assert "conv_transposed_folded(" in source and "def conv_transposed_folded_kernel" in source
    torch.testing.assert_close(run_candidate(source.replace("class Model(", "class _Reference("), model, [x]), model(x), atol=2e-5, rtol=2e-5)
    assert not any(m.kind == "conv_transposed_folded_fp32x3" for m in find_matches(graph, wins=dict(WON)).matches)  # not measured
    wide = graph_of(UpsampleChain(16), [torch.randn(2, 16, 5, 6)])
    assert {m.kind for m in find_matches(wide, wins=won).matches if m.kind.startswith("conv")} == {"conv_transposed_fp32x3"}
    for other, inputs in ((ConvChain(3, 16), [x]), (UpsampleChain(4, 4, groups=4), [torch.randn(2, 4, 5, 6)])):
        assert not any(m.kind == "conv_transposed_folded_fp32x3" for m in find_matches(graph_of(other, inputs), wins=won).matches)

class DepthwiseChain(torch.nn.Module):
    def __init__(self, channels: int = 4, multiplier: int = 1):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels * multiplier, (3, 2), padding=1, groups=channels)

    def forward(self, x):
        return torch.nn.functional.hardswish(self.conv(x)) * 2.0


def test_a_depthwise_convolution_becomes_direct_multiply_adds_once_measured(monkeypatch):
    """``conv_depthwise`` claims convolutions with one input channel a group (a channel
    multiplier too), once it won, and its candidate computes the reference's result; grouped
    convolutions with more channels a group, and an unmeasured verdict, leave it off."""
    from agents.strategist.triton_kernels import t_gemm
    from kernels.conv import depthwise

    assert t_gemm.DEPTHWISE_MAX_TAPS == depthwise.DEPTHWISE_MAX_TAPS
    won = dict(WON, conv_depthwise=Measured("conv_depthwise", 3.0, True, 4.0, "H100"))
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(won))
    x = torch.randn(2, 4, 9, 8)
    for multiplier in (1, 2):
        model = DepthwiseChain(4, multiplier)
        graph = graph_of(model, [x])
        conv = next(m for m in find_matches(graph, wins=won).matches if m.kind.startswith("conv"))
        assert conv.kind == "conv_depthwise" and "depthwise convolution" in conv.rationale and "[3, 2] taps" in conv.rationale
        assert {graph.nodes[i].op for i in conv.nodes} == {"aten::convolution", "aten::hardswish", "aten::mul"}
        source = kernel_candidate(reference_source(DepthwiseChain), graph, ["conv_depthwise_epilogue"], "test")
        assert "conv_depthwise(" in source and "def conv_depthwise_kernel" in source
        torch.testing.assert_close(run_candidate(source.replace("class Model(", "class _Reference("), model, [x]), model(x), atol=1e-5, rtol=1e-5)
    graph = graph_of(DepthwiseChain(), [x])
    assert not any(m.kind == "conv_depthwise" for m in find_matches(graph, wins=dict(WON)).matches)  # not measured
    grouped = graph_of(torch.nn.Conv2d(4, 4, 3, groups=2), [x])
    assert not any(m.kind == "conv_depthwise" for m in find_matches(grouped, wins=won).matches)


def test_the_committed_gpu_verdicts_offer_the_triangle_and_three_way_products_and_keep_the_vendor_library_kinds_off():
    """``kernels/wins.json``: the triangular GEMM, the float32 products and convolutions as three
    TF32 products (the folded window for few channels too), the depthwise and pooling kernels
    measured wins on the H100; float32 on CUDA cores, bfloat16 products and the
    full-precision convolutions lost to cuBLAS/cuDNN (or were not measured) and stay off."""
    wins = measured_kinds(WINS_FILE)
    for kind in ("gemm_triangular", "gemm_fp32x3", "conv_fp32x3", "conv_transposed_fp32x3", "conv_folded_fp32x3", "conv_depthwise", "pool"):
        assert wins[kind].wins and wins[kind].vs_inductor > 1 and "H100" in wins[kind].measured_on
    assert not any(wins[k].wins for k in WON if k in wins)
    linear = graph_of(LinearChain(), [torch.randn(33, 24)])
    assert {m.kind for m in find_matches(linear, wins=wins).matches if m.kind.startswith("gemm")} == {"gemm_fp32x3"}
    conv = graph_of(ConvChain(16), [torch.randn(2, 16, 9, 9)])
    assert {m.kind for m in find_matches(conv, wins=wins).matches if m.kind.startswith("conv")} == {"conv_fp32x3"}
    few = graph_of(ConvChain(), [torch.randn(2, 4, 9, 9)])  # four channels in, six out: cuDNN's
    assert not any(m.kind.startswith("conv") for m in find_matches(few, wins=wins).matches)
    stem = graph_of(ConvChain(4, 16), [torch.randn(2, 4, 9, 9)])  # four in, sixteen out: the folded window
    assert {m.kind for m in find_matches(stem, wins=wins).matches if m.kind.startswith("conv")} == {"conv_folded_fp32x3"}
    depthwise = graph_of(DepthwiseChain(), [torch.randn(2, 4, 9, 9)])
    assert {m.kind for m in find_matches(depthwise, wins=wins).matches if m.kind.startswith("conv")} == {"conv_depthwise"}


WORKLOAD = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """The lower triangle of a product of lower-triangular matrices."""

    def forward(self, A, B):
        return torch.tril(torch.matmul(A, B))


N = 64


def get_inputs():
    return [torch.rand(N, N).tril(), torch.rand(N, N).tril()]


def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_the_offline_strategist_plans_the_triangular_kernel_and_the_evaluator_judges_it_correct(tmp_path):
    from agents.loop import run_job
    from agents.sinks import FileSink
    from agents.strategist import OfflineCoder, OfflinePlanner
    from services.worker.evaluator import EvalSettings, Evaluator

    assert os.environ["TRITON_INTERPRET"] == "1"
    path = tmp_path / "tril_matmul.py"
    path.write_text(WORKLOAD)
    spec = JobSpec(workload=str(path), world_size=1, device="cpu", limits=Limits(max_iters=3), use_kb=False, profile="none")
    settings = EvalSettings.for_device("cpu", trials=2, timing_budget_s=0.05, min_iters=2, max_iters=5)
    with Evaluator("cpu", settings) as evaluator:
        traj = run_job(spec, FileSink(tmp_path / "out"), evaluator=evaluator, planner=OfflinePlanner(), coder=OfflineCoder())
    kernel_steps = [s for s in traj.steps if s.plan.strategy == "triton_kernels"]
    assert kernel_steps, [s.plan.strategy for s in traj.steps]
    step = kernel_steps[0]
    assert step.status == "correct", (step.error, step.feedback)
    assert "gemm_triangular_epilogue" in step.plan.params["templates"]
    assert "triangle" in step.plan.rationale


class Attention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def test_float32_attention_becomes_two_three_way_tf32_products_around_a_softmax_once_measured(monkeypatch):
    """``attention_fp32x3`` takes the attention operator the trace recorded (no mask, no dropout,
    not causal), only once the GPU benchmark measured it, and computes the reference's result."""
    # (Shapes the CPU's fused kernel takes; others the CPU decomposes into products and a softmax,
    # which the GEMM templates take.)
    q, k, v = torch.randn(2, 3, 24, 8), torch.randn(2, 3, 24, 8), torch.randn(2, 3, 24, 8)
    graph = graph_of(Attention(), [q, k, v])
    assert [n.op for n in graph.nodes] == ["aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert not any(m.kind == "attention_fp32x3" for m in find_matches(graph, wins={}).matches)
    won = {"attention_fp32x3": Measured("attention_fp32x3", 1.6, True, 1.7, "H100")}
    monkeypatch.setattr(kernel_plan, "measured_kinds", lambda: dict(won))
    match = next(m for m in find_matches(graph, wins=won).matches if m.kind == "attention_fp32x3")
    assert "three TF32 products" in match.rationale and match.params["keys"] == 24
    source = kernel_candidate(reference_source(Attention), graph, ["attention_fp32x3"], "test")
    assert source.count('precision="tf32x3"') >= 2 and "torch.softmax(" in source
    got = run_candidate(source.replace("class Model(", "class _Reference("), Attention(), [q, k, v])
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v), atol=2e-5, rtol=2e-5)


class CausalAttention(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_causal_or_masked_attention_is_left_to_pytorch():
    q = torch.randn(1, 2, 8, 4)
    won = {"attention_fp32x3": Measured("attention_fp32x3", 1.6, True)}
    assert not any(m.kind == "attention_fp32x3" for m in find_matches(graph_of(CausalAttention(), [q, q, q]), wins=won).matches)
