"""The few-bin count rewrite: which calls it renames (by structure, under every alias), that its
counting equals ``torch.bincount`` and that everything outside its fast path calls
``torch.bincount`` itself, that the strategist proposes it for a step that counts on a GPU, and
that a rewritten candidate is correct on every rank under the real evaluator."""

from __future__ import annotations

import re

import shutil
from pathlib import Path

import pytest
import torch
from agent_helpers import fresh_runtime, planning_context

from agents.analysis import Analysis, build_analysis
from agents.strategist import OfflinePlanner
from agents.strategist.bincount import few_bin_count
from agents.strategist.catalog import options_for
from agents.strategist.codegen import render, source_rewrites
from kloom.static_check import check_candidate
from kloom.suite import find

WORKLOAD = "distributed_sort"


@pytest.mark.parametrize(
    "imports, call",
    [("import torch", "torch.bincount"), ("import torch as T", "T.bincount"), ("from torch import bincount as bc", "bc"), ("from torch import bincount", "bincount")],
)
def test_bincount_calls_are_renamed_under_every_alias(imports, call):
    source = f"{imports}\n\n\ndef f(x, n):\n    return {call}(x, minlength=n) + 1\n"
    out, n = few_bin_count(source)
    assert n == 1 and source_rewrites(source) == {"few_bin_count": 1}
    assert out == source.replace(f"{call}(x", "_kloom_bincount(x"), "only the called name changes"


def test_other_calls_stay_as_they_are():
    source = "import torch\nimport numpy as np\n\n\ndef f(x):\n    return np.bincount(x), torch.histc(x), x.sum()\n"
    assert few_bin_count(source) == (source, 0)
    assert "few_bin_count" not in source_rewrites(source)


def _helper() -> dict:
    scope = fresh_runtime("agents.strategist.bincount.runtime")  # the module the candidate copies
    return scope


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
@pytest.mark.parametrize("bins, minlength", [(1, 0), (4, 4), (3, 8), (64, 0), (7, 64)])
def test_few_bins_count_exactly_what_bincount_counts(dtype, bins, minlength):
    few = _helper()["_kl_few_bins"]
    torch.manual_seed(bins * 100 + minlength)
    x = torch.randint(0, bins, (100_003,), dtype=dtype)
    got = few(x, minlength)
    want = torch.bincount(x, minlength=minlength)
    assert got.dtype == want.dtype == torch.int64 and torch.equal(got, want)


def test_counting_in_chunks_adds_up():
    scope = _helper()
    scope["_KL_FEW_BINS_CHUNK"] = 40  # 10 elements per chunk at 4 bins
    x = torch.randint(0, 4, (1003,))
    assert torch.equal(scope["_kl_few_bins"](x, 4), torch.bincount(x, minlength=4))


@pytest.mark.parametrize("x, minlength, why", [(torch.tensor([0, -1, 2]), 0, "a negative value"), (torch.tensor([0, 64]), 0, "65 bins"), (torch.tensor([1]), 65, "minlength above the cap")])
def test_outside_the_few_bins_it_declines(x, minlength, why):
    assert _helper()["_kl_few_bins"](x, minlength) is None, why


def test_the_helper_calls_bincount_for_everything_it_does_not_cover():
    bincount = _helper()["_kloom_bincount"]
    x = torch.randint(0, 5, (1 << 17,))
    w = torch.rand(x.shape)
    assert torch.equal(bincount(x, minlength=8), torch.bincount(x, minlength=8)), "a CPU tensor"
    assert torch.allclose(bincount(x, w, 3), torch.bincount(x, w, 3)), "weights"
    with pytest.raises(RuntimeError):
        bincount(torch.tensor([-1, 2]))  # what bincount raises


def test_the_catalog_offers_it_on_a_gpu_only():
    base = dict(
        family="x", world_size=4, device="cuda", collectives=["alltoall_base"], collective_sizes={}, ops=["aten::bincount"], n_kernels=20,
        n_elementwise=0, n_matmul=0, n_attention=0, host_syncs=4, host_sync_ops=["aten::_local_scalar_dense"], patterns=[], input_shapes=[],
        dtypes=[], total_input_bytes=0, param_bytes=0, collective_bytes=0, mutated_inputs=[], output_shapes=[], dominant="link", reference_ms=6.0,
    )
    options = options_for(Analysis(**base, source_rewrites={"few_bin_count": 2}))
    assert options[0].strategy == "few_bin_count" and options[0].params == {"wrapper": "none", "rewrites": ["few_bin_count"]}
    assert "few_bin_count" not in {o.strategy for o in options_for(Analysis(**dict(base, device="cpu"), source_rewrites={"few_bin_count": 2}))}
    assert "few_bin_count" not in {o.strategy for o in options_for(Analysis(**base))}
    # Where the trace saw how many bins: a few, it is offered; many, the rewrite would only call
    # bincount itself, so it is not worth a candidate.
    assert options_for(Analysis(**base, source_rewrites={"few_bin_count": 2}, bincount_bins=4))[0].strategy == "few_bin_count"
    assert "few_bin_count" not in {o.strategy for o in options_for(Analysis(**base, source_rewrites={"few_bin_count": 2}, bincount_bins=256))}


def test_the_trace_says_how_many_bins_bincount_counts_into(evaluator):
    """The sort's destination ranks (as many bins as ranks) against the MoE dispatch's experts."""
    sort = build_analysis(evaluator.analyze(Path(find(WORKLOAD).path), world_size=2), family="x", world_size=2, device="cpu", baseline=None)
    assert sort.bincount_bins == 2
    moe_path = Path(find("moe_dispatch").path)
    moe = build_analysis(evaluator.analyze(moe_path, world_size=2), family="x", world_size=2, device="cpu", baseline=None)
    experts = re.search(r'"ci": dict\([^)]*experts=(\d+)', moe_path.read_text())
    assert experts and moe.bincount_bins is not None and moe.bincount_bins >= int(experts.group(1))
    no_count = build_analysis(evaluator.analyze(Path(find("all_reduce_small").path), world_size=2), family="x", world_size=2, device="cpu", baseline=None)
    assert no_count.bincount_bins is None


def test_the_strategist_proposes_it_by_structure_not_name(evaluator, tmp_path):
    original = Path(find(WORKLOAD).path)
    renamed = tmp_path / "bucket_things.py"
    shutil.copy(original, renamed)
    for path in (original, renamed):
        traces = evaluator.analyze(path, world_size=2)
        analysis = build_analysis(traces, family="x", world_size=2, device="cuda", baseline=None)
        analysis.source_rewrites = source_rewrites(path.read_text())
        plan, _ = OfflinePlanner().plan(planning_context(path, analysis))
        assert plan.strategy == "few_bin_count", (path.name, plan.strategy)


def test_a_rewritten_candidate_is_correct_on_every_rank(evaluator, tmp_path):
    path = Path(find(WORKLOAD).path)
    code = render(path.read_text(), {"wrapper": "none", "rewrites": ["few_bin_count"]}, mutated_inputs=[], label="few_bin_count")
    assert "_kloom_bincount(dest, minlength=world)" in code and check_candidate(code) == []
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    result = evaluator.evaluate(path, candidate, world_size=2)
    assert result.status == "correct", result.error


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_on_a_gpu_it_counts_what_bincount_counts():
    bincount = _helper()["_kloom_bincount"]
    x = torch.randint(0, 4, (1 << 23,), device="cuda")
    assert torch.equal(bincount(x, minlength=4), torch.bincount(x, minlength=4))
    assert torch.equal(bincount(x[:100], minlength=4), torch.bincount(x[:100], minlength=4)), "small: bincount itself"
    assert torch.equal(bincount(x * 20, minlength=4), torch.bincount(x * 20, minlength=4)), "61 bins"
    assert torch.equal(bincount(x * 30, minlength=4), torch.bincount(x * 30, minlength=4)), "91 bins: bincount itself"
