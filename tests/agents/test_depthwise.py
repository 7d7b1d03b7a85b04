"""The depthwise convolution rewrite: which calls it renames (under every alias, by structure),
that its helper computes what ``conv1d``/``conv2d`` computes and falls back to them otherwise,
that the strategist proposes it for a workload with a depthwise convolution whatever the file is
called, and that rewritten candidates are correct on every rank under the real evaluator."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from agent_helpers import fresh_runtime, planning_context

from agents.analysis import Analysis, build_analysis
from agents.strategist import OfflinePlanner
from agents.strategist.catalog import options_for
from agents.strategist.codegen import NotApplicable, render, source_rewrites
from agents.strategist.depthwise import depthwise_conv
from kloom.static_check import check_candidate
from kloom.suite import find

WORKLOAD = "causal_conv1d_cp"
#: bf16: the evaluator's tolerance (services/worker/evaluator/compare.py); float32/float64: tighter than its.
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-12, 1e-12), torch.bfloat16: (1e-2, 1.6e-2)}


@pytest.mark.parametrize(
    "imports, call",
    [
        ("import torch.nn.functional as F", "F.conv1d"),
        ("import torch.nn.functional as fn", "fn.conv1d"),
        ("import torch", "torch.nn.functional.conv1d"),
        ("import torch.nn.functional", "torch.nn.functional.conv1d"),
        ("import torch", "torch.conv1d"),
        ("import torch as T", "T.conv1d"),
        ("from torch import nn", "nn.functional.conv1d"),
        ("import torch.nn as nn", "nn.functional.conv1d"),
        ("from torch.nn import functional as G", "G.conv1d"),
        ("from torch.nn.functional import conv1d as c", "c"),
        ("from torch.nn.functional import conv1d", "conv1d"),
        ("from torch import conv1d as tc", "tc"),
    ],
)
def test_a_conv1d_with_groups_is_renamed_under_every_alias(imports, call):
    source = f"{imports}\n\n\ndef f(x, w, b):\n    # the arguments keep their text\n    return {call}(x, w, b, padding=2, groups=x.shape[1]) * 2\n"
    assert source_rewrites(source) == {"depthwise_conv": 1}
    out, n = depthwise_conv(source)
    assert n == 1
    assert out == source.replace(f"{call}(x, w", "_kloom_conv1d(x, w"), "only the called name changes"


def test_positional_keyword_nested_and_2d_calls_keep_their_arguments():
    source = textwrap.dedent(
        """
        import torch.nn.functional as F

        def f(x, w, b, w2):
            y = F.conv1d(x, w, b, 1, 3, 1, x.shape[1])  # all positional
            label = "größe"; y2 = F.conv1d(y, w, groups=k)  # columns after non-ASCII text
            z = F.conv1d(input=F.conv1d(y, w, groups=4), weight=w, groups=x.size(1), padding="valid")
            return F.conv2d(z[..., None], w2, None, stride=(1, 1), groups=g)
        """
    )
    out, n = depthwise_conv(source)
    assert n == 5
    assert 'label = "größe"; y2 = _kloom_conv1d(y, w, groups=k)  # columns after non-ASCII text' in out
    assert "y = _kloom_conv1d(x, w, b, 1, 3, 1, x.shape[1])  # all positional" in out
    assert 'z = _kloom_conv1d(input=_kloom_conv1d(y, w, groups=4), weight=w, groups=x.size(1), padding="valid")' in out
    assert "return _kloom_conv2d(z[..., None], w2, None, stride=(1, 1), groups=g)" in out


@pytest.mark.parametrize(
    "body, why",
    [
        ("return F.conv1d(x, w, b, padding=1)", "no groups: a dense convolution"),
        ("return F.conv1d(x, w, b, 1, 0, 1, 1)", "groups=1 positionally"),
        ("return F.conv1d(x, w, groups=1)", "groups=1 by keyword"),
        ("return F.conv1d(x, w, groups=x.shape[1], stride=2)", "a stride other than 1"),
        ("return F.conv1d(x, w, b, 1, 0, (2,), x.shape[1])", "a dilation other than 1"),
        ("return F.conv_transpose1d(x, w, groups=x.shape[1])", "another operator"),
        ("return F.linear(x, w, b) + x.sum()", "no convolution at all"),
        ("return other.conv1d(x, w, groups=x.shape[1])", "a conv1d of another module"),
        ("return conv1d(x, w, groups=x.shape[1])", "a local function of the same name"),
    ],
)
def test_calls_that_cannot_be_depthwise_and_other_code_stay_as_they_are(body, why):
    source = f"import torch.nn.functional as F\nimport mylib as other\n\n\ndef conv1d(*a, **k):\n    return a\n\n\ndef f(x, w, b):\n    {body}\n"
    assert depthwise_conv(source) == (source, 0), why
    assert source_rewrites(source) == {}
    with pytest.raises(NotApplicable):
        render(source + "\nclass Model:\n    pass\n", {"wrapper": "none", "rewrites": ["depthwise_conv"]}, mutated_inputs=[], label="t")


def test_suite_workloads_with_dense_convolutions_get_no_such_option():
    for name in ("conv1d_halo", "conv2d_halo"):
        assert "depthwise_conv" not in source_rewrites(Path(find(name).path).read_text()), name
    assert source_rewrites(Path(find(WORKLOAD).path).read_text()) == {"depthwise_conv": 1}


def _helpers(calls: list | None = None) -> dict:
    """The helper's namespace; its fallback convolutions are recorded in ``calls`` when given
    (then a depthwise case that fell back would show up there)."""
    scope = fresh_runtime("agents.strategist.depthwise.runtime")  # the module the candidate copies
    if calls is not None:

        def record(name):
            def conv(*args, **kwargs):
                calls.append((name, args, kwargs))
                return getattr(F, name)(*args, **kwargs)

            return conv

        scope["_kl_F"] = SimpleNamespace(pad=F.pad, conv1d=record("conv1d"), conv2d=record("conv2d"))
    return scope


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    atol, rtol = TOLERANCE[want.dtype]
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("kernel", [1, 4, 7])
@pytest.mark.parametrize("padding", [0, 3, (2,), [1], "valid"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_depthwise_conv1d_matches_the_convolution(dtype, kernel, padding, with_bias):
    calls: list = []
    conv1d = _helpers(calls)["_kloom_conv1d"]
    g = torch.Generator().manual_seed(kernel)
    channels = 24
    x = torch.randn(3, channels, 50, generator=g).to(dtype)
    w = (torch.randn(channels, 1, kernel, generator=g) / kernel**0.5).to(dtype)
    b = torch.randn(channels, generator=g).to(dtype) if with_bias else None
    got = conv1d(x, w, b, padding=padding, groups=channels)
    assert calls == [], "the depthwise case took the fast path"
    _close(got, F.conv1d(x, w, b, padding=padding, groups=channels))
    if dtype == torch.bfloat16:
        # One rounding of a float32 accumulation: as close to the exact result as cuDNN's.
        exact = F.conv1d(x.double(), w.double(), None if b is None else b.double(), padding=padding, groups=channels)
        assert (got.double() - exact).abs().max() <= (F.conv1d(x, w, b, padding=padding, groups=channels).double() - exact).abs().max() * 1.01 + 1e-6


def test_the_workload_step_matches_in_bf16_at_its_gpu_width():
    """The suite workload's convolution (4 taps, bias, concatenated history), bf16, 5376 channels."""
    conv1d = _helpers([])["_kloom_conv1d"]
    channels, kernel = 5376, 4
    x = torch.randn(2, channels, 64).to(torch.bfloat16)
    previous = torch.randn(2, channels, kernel - 1).to(torch.bfloat16)
    w = (torch.randn(channels, 1, kernel) / 2).to(torch.bfloat16)
    b = torch.randn(channels).to(torch.bfloat16)
    joined = torch.cat([previous, x], dim=-1)
    _close(F.silu(conv1d(joined, w, b, groups=x.shape[1])), F.silu(F.conv1d(joined, w, b, groups=x.shape[1])))


def test_keyword_and_positional_forms_and_depthwise_conv2d():
    calls: list = []
    scope = _helpers(calls)
    x, w, b = torch.randn(2, 6, 20), torch.randn(6, 1, 3), torch.randn(6)
    want = F.conv1d(x, w, b, 1, 1, 1, 6)
    _close(scope["_kloom_conv1d"](x, w, b, 1, 1, 1, 6), want)
    _close(scope["_kloom_conv1d"](input=x, weight=w, bias=b, padding=1, groups=6), want)
    image, w2 = torch.randn(2, 6, 9, 11), torch.randn(6, 1, 3, 5)
    for padding in (0, 2, (1, 2), "valid"):
        _close(scope["_kloom_conv2d"](image, w2, b, padding=padding, groups=6), F.conv2d(image, w2, b, padding=padding, groups=6))
    assert calls == []


@pytest.mark.parametrize(
    "x_shape, w_shape, kwargs, why",
    [
        ((2, 6, 20), (6, 6, 3), {}, "groups=1: dense"),
        ((2, 6, 20), (6, 1, 3), {"groups": 6, "stride": 2}, "stride 2"),
        ((2, 6, 20), (6, 1, 3), {"groups": 6, "dilation": 2}, "dilation 2"),
        ((2, 6, 20), (6, 1, 3), {"groups": 6, "padding": "same"}, "'same' padding"),
        ((2, 6, 20), (6, 2, 3), {"groups": 3}, "grouped, not depthwise"),
        ((2, 6, 20), (12, 1, 3), {"groups": 6}, "a channel multiplier of 2"),
        ((6, 20), (6, 1, 3), {"groups": 6}, "unbatched input"),
    ],
)
def test_anything_else_calls_the_original_convolution(x_shape, w_shape, kwargs, why):
    calls: list = []
    conv1d = _helpers(calls)["_kloom_conv1d"]
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(w_shape[0])
    got = conv1d(x, w, b, **kwargs)
    assert calls == [("conv1d", (x, w, b), kwargs)], why
    assert torch.equal(got, F.conv1d(x, w, b, **kwargs)), why


def test_invalid_calls_raise_what_the_convolution_raises():
    conv1d = _helpers()["_kloom_conv1d"]
    x, w = torch.randn(2, 6, 20), torch.randn(6, 1, 3)
    for args, kwargs in [
        ((x, w, torch.randn(5)), {"groups": 6}),  # a bias of the wrong size
        ((x, w.double()), {"groups": 6}),  # mixed dtypes
        ((x, w), {"groups": 6, "input": x}),  # an argument given twice
        ((x[..., :2], w), {"groups": 6}),  # shorter than the kernel
    ]:
        with pytest.raises((RuntimeError, TypeError)) as expected:
            F.conv1d(*args, **kwargs)
        with pytest.raises(expected.type):
            conv1d(*args, **kwargs)


def test_the_catalog_offers_it_compiled_first_wherever_a_call_may_be_depthwise():
    base = dict(
        family="x", world_size=2, device="cuda", collectives=["send", "recv"], collective_sizes={}, ops=[], n_kernels=6,
        n_elementwise=0, n_matmul=0, n_attention=0, host_syncs=0, host_sync_ops=[], patterns=[], input_shapes=[], dtypes=[],
        total_input_bytes=0, param_bytes=0, collective_bytes=0, mutated_inputs=[], output_shapes=[], dominant="hbm",
        reference_ms=2.0,
    )
    options = options_for(Analysis(**base, source_rewrites={"depthwise_conv": 1}))
    assert options[0].strategy == "depthwise_conv_compiled", "compiled even though the trace counted no elementwise op"
    assert options[0].params == {"wrapper": "compile", "compile_mode": "default", "rewrites": ["depthwise_conv"]}
    assert "depthwise_conv" in {o.strategy for o in options}
    single = options_for(Analysis(**dict(base, world_size=1, device="cpu"), source_rewrites={"depthwise_conv": 1}))
    assert single[0].strategy == "depthwise_conv_compiled", "a local convolution: any world size"
    assert not {o.strategy for o in options_for(Analysis(**base))} & {"depthwise_conv", "depthwise_conv_compiled"}


def test_the_strategist_proposes_it_by_structure_not_name(evaluator, tmp_path):
    original = Path(find(WORKLOAD).path)
    renamed = tmp_path / "something_else_entirely.py"
    shutil.copy(original, renamed)
    plans = []
    for path in (original, renamed):
        traces = evaluator.analyze(path, world_size=2)
        for device in ("cpu", "cuda"):
            analysis = build_analysis(traces, family="x", world_size=2, device=device, baseline=None)
            analysis.source_rewrites = source_rewrites(path.read_text())  # as the loop does
            plan, _ = OfflinePlanner().plan(planning_context(path, analysis))
            assert plan.strategy == "depthwise_conv_compiled", (path.name, device, plan.strategy)
            plans.append((device, plan.strategy, plan.params))
    assert plans[:2] == plans[2:]


@pytest.mark.parametrize("world_size", [2, 4])
def test_a_rewritten_candidate_is_correct_on_every_rank(evaluator, tmp_path, world_size):
    path = Path(find(WORKLOAD).path)
    code = render(path.read_text(), {"wrapper": "none", "rewrites": ["depthwise_conv"]}, mutated_inputs=[], label="depthwise_conv")
    assert "_kloom_conv1d(torch.cat([previous, x], dim=-1), self.weight, self.bias, groups=x.shape[1])" in code
    assert check_candidate(code) == []
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    result = evaluator.evaluate(path, candidate, world_size=world_size)
    assert result.status == "correct", result.error
    assert len(result.trials) >= 5 and all(t.ok for t in result.trials)


@pytest.mark.slow
def test_the_compiled_candidate_is_correct_on_every_rank(evaluator, tmp_path):
    path = Path(find(WORKLOAD).path)
    params = {"wrapper": "compile", "compile_mode": "default", "rewrites": ["depthwise_conv"]}
    candidate = tmp_path / "candidate.py"
    candidate.write_text(render(path.read_text(), params, mutated_inputs=[], label="depthwise_conv_compiled"))
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error


@pytest.mark.parametrize(
    "old, new, why",
    [
        ("out.add_(bias.to(accumulate).reshape(per_channel))", "pass", "the bias dropped"),
        ("tap = w[(slice(None), 0) + offset]", "tap = w.flip(-1)[(slice(None), 0) + offset]", "the kernel flipped (a true convolution)"),
    ],
)
def test_a_wrong_helper_would_be_caught(evaluator, tmp_path, old, new, why):
    """Control: a helper that computes something else is judged incorrect; the helper's own
    tests above are what keep such a mistake out."""
    path = Path(find(WORKLOAD).path)
    code = render(path.read_text(), {"wrapper": "none", "rewrites": ["depthwise_conv"]}, mutated_inputs=[], label="depthwise_conv")
    broken = code.replace(old, new, 1)
    assert broken != code
    candidate = tmp_path / "candidate.py"
    candidate.write_text(broken)
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "incorrect", why
