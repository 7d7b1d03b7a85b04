"""The split causal attention rewrite: which calls it renames (masked attention calls in a module
that builds a bottom-right causal bias), that the unmasked and square causal pieces merged by
their log-sum-exps equal the bottom-right causal attention (grouped-query heads too), that
everything else calls ``scaled_dot_product_attention`` itself, and that a rewritten candidate is
correct on every rank under the real evaluator (and a wrong merge is caught)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from agent_helpers import fresh_runtime, planning_context
from torch.nn.attention.bias import causal_lower_right, causal_upper_left

from agents.analysis import build_analysis, untraced_analysis
from agents.strategist import OfflinePlanner
from agents.strategist.attention import split_causal_attention
from agents.strategist.codegen import render, source_rewrites
from kloom.static_check import check_candidate
from kloom.suite import find
from tests import eval_records

WORKLOAD = "cp_allgather_kv_attention"
TOLERANCE = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-10), torch.bfloat16: (1e-3, 1.6e-2)}


@pytest.mark.parametrize(
    "imports, call",
    [("import torch.nn.functional as F", "F.scaled_dot_product_attention"), ("import torch", "torch.nn.functional.scaled_dot_product_attention"),
     ("from torch.nn.functional import scaled_dot_product_attention as sdpa", "sdpa")],
)  # fmt: skip
def test_masked_calls_are_renamed_where_the_module_builds_a_lower_right_bias(imports, call):
    source = (
        f"{imports}\nfrom torch.nn.attention.bias import causal_lower_right\n\n\ndef f(q, k, v):\n"
        f"    m = causal_lower_right(q.shape[2], k.shape[2])\n    return {call}(q, k, v, attn_mask=m) + {call}(q, k, v, m) + {call}(q, k, v)\n"
    )
    out, n = split_causal_attention(source)
    assert n == 2 and source_rewrites(source) == {"split_causal_attention": 2}
    assert out.count("_kloom_sdpa(q, k, v") == 2 and f"{call}(q, k, v)\n" in out, "the unmasked call stays"


def test_without_a_lower_right_bias_in_the_module_nothing_is_renamed():
    source = "import torch.nn.functional as F\n\n\ndef f(q, k, v, m):\n    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)\n"
    assert split_causal_attention(source) == (source, 0)


def _helper(calls: list | None = None) -> dict:
    scope = fresh_runtime("agents.strategist.attention.runtime")  # the module the candidate copies
    if calls is not None:

        def sdpa(*args, **kwargs):
            calls.append(kwargs)
            return F.scaled_dot_product_attention(*args, **kwargs)

        scope["_kl_F"] = SimpleNamespace(scaled_dot_product_attention=sdpa)
    return scope


def _qkv(heads, kv_heads, sq, sk, dtype, d=16, contiguous=True):
    torch.manual_seed(sq * 31 + sk)
    q = torch.randn(2, heads, sq, d, dtype=dtype)
    if not contiguous:
        q = torch.randn(2, sq, heads, d, dtype=dtype).transpose(1, 2)
    return q, torch.randn(2, kv_heads, sk, d, dtype=dtype), torch.randn(2, kv_heads, sk, d, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2), (8, 1)])
@pytest.mark.parametrize("sq, sk", [(8, 24), (5, 6), (16, 64)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_the_pieces_merge_to_the_bottom_right_causal_attention(dtype, heads, kv_heads, sq, sk, contiguous):
    calls: list = []
    sdpa = _helper(calls)["_kloom_sdpa"]
    q, k, v = _qkv(heads, kv_heads, sq, sk, dtype, contiguous=contiguous)
    mask = causal_lower_right(sq, sk)
    gqa = heads != kv_heads
    got = sdpa(q, k, v, attn_mask=mask, enable_gqa=gqa)
    assert calls == [], "split, not the original call"
    # against the attention in float64, rounded once (PyTorch's own bf16 CPU kernel rounds on the way)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, enable_gqa=gqa).to(dtype)
    atol, rtol = TOLERANCE[dtype]
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


def test_an_explicit_scale_is_kept():
    sdpa = _helper()["_kloom_sdpa"]
    q, k, v = _qkv(2, 2, 4, 12, torch.float64)
    mask = causal_lower_right(4, 12)
    torch.testing.assert_close(sdpa(q, k, v, mask, scale=0.3), F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3))


@pytest.mark.parametrize(
    "args, kwargs, why",
    [
        ((4, 4, 8, 24), {}, "no mask"),
        ((4, 4, 8, 24), {"is_causal": True}, "is_causal, not a bias"),
        ((4, 4, 8, 24), {"mask": "upper_left"}, "a top-left bias"),
        ((4, 4, 8, 8), {"mask": "lower_right"}, "as many keys as queries"),
        ((4, 2, 8, 24), {"mask": "lower_right"}, "grouped heads without enable_gqa"),
        ((4, 4, 8, 24), {"mask": "lower_right", "dropout_p": 0.5}, "dropout"),
        ((4, 4, 8, 24), {"mask": "dense"}, "a tensor mask"),
    ],
)
def test_everything_else_calls_the_original(args, kwargs, why):
    calls: list = []
    sdpa = _helper(calls)["_kloom_sdpa"]
    q, k, v = _qkv(*args, torch.float32)
    kind = kwargs.pop("mask", None)
    masks = {"lower_right": causal_lower_right, "upper_left": causal_upper_left, "dense": lambda a, b: torch.ones(a, b, dtype=torch.bool).tril()}
    mask = masks[kind](args[2], args[3]) if kind else None
    try:
        sdpa(q, k, v, attn_mask=mask, **kwargs)
    except RuntimeError:
        pass  # grouped heads without enable_gqa: what the original raises
    assert len(calls) == 1, why


def test_the_tracer_follows_a_reference_that_builds_a_tensor_subclass(evaluator):
    """The reference builds a ``CausalBias`` (a plain tensor subclass) inside the traced call: the
    trace still sees its all-gathers and its attention, on every rank."""
    traces = evaluator.analyze(Path(find(WORKLOAD).path), world_size=2)
    assert len(traces) == 2
    for trace in traces:
        assert trace["n_attention"] >= 1 and {c["op"] for c in trace["collectives"]} & {"allgather", "all_gather_into_tensor", "_allgather_base"}, trace["ops"]


@pytest.mark.parametrize("traced", [True, False])
def test_the_strategist_proposes_it_by_structure_not_name(tmp_path, evaluator, traced):
    original = Path(find(WORKLOAD).path)
    renamed = tmp_path / "gathered_keys.py"
    shutil.copy(original, renamed)
    baseline = eval_records.baseline(3.19, roofline=eval_records.roofline("compute", 1.23))  # as measured on 4xH200
    for path in (original, renamed):
        for device in ("cuda", "cpu"):
            if traced:
                analysis = build_analysis(evaluator.analyze(path, world_size=2), family="x", world_size=2, device=device, baseline=baseline)
            else:  # a reference the tracer cannot follow: the loop plans from the untraced analysis
                analysis = untraced_analysis("not traced", family="x", world_size=2, device=device, baseline=baseline)
            analysis.source_rewrites = source_rewrites(path.read_text())
            plan, _ = OfflinePlanner().plan(planning_context(path, analysis))
            assert (plan.strategy == "split_causal_attention") == (device == "cuda"), (path.name, device, plan.strategy)


def _candidate(tmp_path, old: str | None = None, new: str | None = None) -> Path:
    code = render(Path(find(WORKLOAD).path).read_text(), {"wrapper": "none", "rewrites": ["split_causal_attention"]}, mutated_inputs=[], label="split")
    assert "_kloom_sdpa(q, k[:, :, :keys]" in code and check_candidate(code) == []
    if old is not None:
        assert old in code
        code = code.replace(old, new, 1)
    path = tmp_path / "candidate.py"
    path.write_text(code)
    return path


@pytest.mark.parametrize("world_size", [2, 4])
def test_a_rewritten_candidate_is_correct_on_every_rank(evaluator, tmp_path, world_size):
    result = evaluator.evaluate(Path(find(WORKLOAD).path), _candidate(tmp_path), world_size=world_size)
    assert result.status == "correct", result.error


def test_a_wrong_merge_would_be_caught(evaluator, tmp_path):
    """Control: the pieces merged with swapped weights are judged incorrect."""
    broken = _candidate(tmp_path, "sigmoid(lse_b - lse_a)", "sigmoid(lse_a - lse_b)")
    result = evaluator.evaluate(Path(find(WORKLOAD).path), broken, world_size=2)
    assert result.status == "incorrect"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("sq, sk", [(4096, 16384), (4096, 8192), (1000, 3000)])
def test_on_a_gpu_the_fast_kernels_compute_the_same_attention(sq, sk):
    scope = _helper()
    torch.manual_seed(0)
    q = torch.randn(1, 32, sq, 128, dtype=torch.bfloat16, device="cuda")
    k, v = (torch.randn(1, 8, sk, 128, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    mask = causal_lower_right(sq, sk)
    got = scope["_kloom_sdpa"](q, k, v, attn_mask=mask, enable_gqa=True)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(got, want, atol=1e-3, rtol=1.6e-2)
    assert scope["_kl_attention_served"], "a GPU kernel served the pieces"
    print("kernels that served:", scope["_kl_attention_served"])
