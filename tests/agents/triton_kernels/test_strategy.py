"""The kernel strategy end to end on the CPU: the catalog offers it by structure where Triton
runs (the interpreter here), the offline planner and coder write its candidate, and the real
evaluator judges those candidates correct on every fixture (softmax, LayerNorm, a reduction with
a chain after it, cross-entropy, argmax, and norms with scans)."""

from __future__ import annotations

import json
import shutil

import pytest
from agent_helpers import planning_context
from kernel_helpers import WORKLOADS, judged_kernel_candidate, traced

from agents.analysis import Analysis, build_analysis
from agents.roles import KBAdvice, KernelHint
from agents.strategist import OfflinePlanner
from agents.strategist.catalog import options_for
from agents.strategist.triton_kernels import plan as kernel_plan
from agents.strategist.triton_kernels.option import GRAPHED, STRATEGY, kernel_candidate_for, kernel_offers
from kloom.static_check import check_candidate
from tests import sweeps

FIXTURES = ["softmax_rows", "layernorm_affine", "sum_then_chain", "cross_entropy", "argmax_dim", "norms_and_scans", "triplet_margin"]


def _analysis(name: str, device: str = "cpu") -> Analysis:
    a = Analysis(
        family="single_gpu", world_size=1, device=device, collectives=[], collective_sizes={}, ops=[], n_kernels=3, n_elementwise=3,
        n_matmul=0, n_attention=0, host_syncs=0, host_sync_ops=[], patterns=[], input_shapes=[], dtypes=["float32"],
        total_input_bytes=0, param_bytes=0, collective_bytes=0, mutated_inputs=[], output_shapes=[], dominant="hbm",
    )  # fmt: skip
    a.op_graph = traced(name)
    return a


def test_offered_where_triton_runs_and_not_elsewhere(interpret, monkeypatch):
    offers = kernel_offers(_analysis("softmax_rows"))
    assert len(offers) == 1 and offers[0].params == {"wrapper": "kernels", "templates": ["softmax"]}
    assert "softmax over dim 1 of [16, 300] float32" in offers[0].rationale
    assert kernel_offers(_analysis("softmax_rows", device="cuda"))
    monkeypatch.delenv("TRITON_INTERPRET")
    assert kernel_offers(_analysis("softmax_rows")) == [], "no GPU and no interpreter: the kernels cannot run"
    assert kernel_offers(_analysis("softmax_rows", device="cuda"))


def test_the_catalog_ranks_it_beside_torch_compile(interpret):
    options = options_for(_analysis("norms_and_scans"))
    names = [o.strategy for o in options]
    assert STRATEGY in names and "torch_compile" in names
    assert names.index(STRATEGY) < names.index("torch_compile"), "unmeasured kernels go first; the evaluator decides"


def test_a_replay_whose_host_time_outlasts_a_launch_bound_reference_goes_behind_compile_and_graphs(interpret):
    a = _analysis("norms_and_scans", device="cuda")
    assert a.graph_capturable
    calls = len(a.op_graph.nodes)
    a.reference_ms = 100.0  # far from launch-bound: the kernels' prior stands
    names = [o.strategy for o in options_for(a)]
    assert names.index(STRATEGY) < names.index("torch_compile")
    a.reference_ms = calls * 0.008  # each operator one eager launch: the replay's Python calls cost more
    options = options_for(a)
    plain = next(i for i, o in enumerate(options) if o.strategy == STRATEGY and o.params["wrapper"] == "kernels")
    rank = {o.strategy: i for i, o in reversed(list(enumerate(options)))}
    assert rank["torch_compile"] < plain and rank["compile_cuda_graph"] < plain and rank["cuda_graph"] < plain
    assert plain < rank["reference_copy"]
    assert "predicted 0." in options[plain].rationale and "launch-bound" in options[plain].rationale
    a.device = "cpu"  # the interpreter's host time is no GPU's: no prediction there
    names = [o.strategy for o in options_for(a)]
    assert names.index(STRATEGY) < names.index("torch_compile")


@pytest.mark.slow
@pytest.mark.parametrize("name", sweeps.params(FIXTURES, every=2))  # CI: every other one (tests/sweeps.py)
def test_candidates_are_correct_under_the_real_evaluator(interpreted_evaluator, interpret, tmp_path, monkeypatch, name):
    # Every template is judged, also those the GPU benchmark measured slower than inductor (which
    # the planner then leaves out): as if no measurement were committed yet.
    monkeypatch.setattr(kernel_plan, "WINS_FILE", tmp_path / "no_wins.json")
    path = tmp_path / f"renamed_{name}.py"  # a name of its own: planning follows structure only
    shutil.copy(WORKLOADS / f"{name}.py", path)
    judged_kernel_candidate(interpreted_evaluator, path, tmp_path)


def test_a_graphed_replay_is_offered_on_a_gpu_without_host_syncs_only(interpret):
    a = _analysis("softmax_rows", device="cuda")
    a.reference_ms = len(a.op_graph.nodes) * 0.008
    graphed = [o for o in kernel_offers(a) if o.params["wrapper"] == GRAPHED]
    assert len(graphed) == 1 and "captured in one CUDA graph" in graphed[0].rationale
    plain = next(o for o in kernel_offers(a) if o.params["wrapper"] == "kernels")
    assert graphed[0].score > plain.score, "on a launch-bound step the graph goes before the plain replay"
    a.host_syncs = 1
    assert not [o for o in kernel_offers(a) if o.params["wrapper"] == GRAPHED], "a host sync cannot be captured"
    assert not [o for o in kernel_offers(_analysis("softmax_rows")) if o.params["wrapper"] == GRAPHED], "no graph off a GPU"


def test_a_graphed_replay_is_weighed_against_the_replays_host_time_not_the_references_launches(interpret):
    """A step of few kernels (a product, say) launches little from the reference's side, but the
    replay calls each region's kernel from Python (~0.2 ms each, which the judge counts): the graph
    is offered while its copies cost less than that, and not once they cost more."""
    a = _analysis("softmax_rows", device="cuda")
    a.reference_ms, a.n_kernels = 2.0, 1
    a.total_input_bytes = 150_000_000  # copies ~0.1 ms: more than one launch, less than one region's call
    graphed = [o for o in kernel_offers(a) if o.params["wrapper"] == GRAPHED]
    assert len(graphed) == 1 and "the replay's host time" in graphed[0].rationale
    a.total_input_bytes = 3_000_000_000  # copies ~2 ms: more than the replay's host time
    assert not [o for o in kernel_offers(a) if o.params["wrapper"] == GRAPHED]


def test_kinds_that_won_only_on_the_gpu_are_offered_on_a_gpu_only(interpret):
    """A float32 product wins on the GPU as three TF32 products (kernels/wins.json); under the
    CPU's interpreter the same kernel only outlasts the reference, so a CPU job is not offered it,
    and the structure-only kinds still are."""
    import torch

    from kloom.opgraph import OpGraph
    from services.worker.evaluator.tracing import trace_call

    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.Softmax(dim=-1))
    a = _analysis("softmax_rows")
    a.op_graph = OpGraph.from_dict(trace_call(model, [torch.rand(16, 32)])["op_graph"])
    templates = lambda offers: {t for o in offers for t in o.params["templates"]}  # noqa: E731
    assert "gemm_fp32x3_epilogue" not in templates(kernel_offers(a))
    assert "softmax" in templates(kernel_offers(a))
    a.device = "cuda"
    assert "gemm_fp32x3_epilogue" in templates(kernel_offers(a))


@pytest.mark.slow
def test_the_graphed_candidate_is_correct_under_the_real_evaluator(interpreted_evaluator, interpret, tmp_path, monkeypatch):
    """Off a GPU its forward runs the replay itself (the capture is the GPU test's): the code, the
    embedded graph runtime and the guard are what this checks."""
    monkeypatch.setattr(kernel_plan, "WINS_FILE", tmp_path / "no_wins.json")
    path = tmp_path / "renamed.py"
    shutil.copy(WORKLOADS / "layernorm_affine.py", path)
    traces = interpreted_evaluator.analyze(path, world_size=1)
    analysis = build_analysis(traces, family="single_gpu", world_size=1, device="cpu", baseline=None)
    code = kernel_candidate_for(path.read_text(), analysis, {"wrapper": GRAPHED, "templates": None}, "graphed")
    assert "_kloom_graphed(self._kl_graphs, self._kl_replay" in code and check_candidate(code) == []
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    result = interpreted_evaluator.evaluate(path, candidate, world_size=1)
    assert result.status == "correct", (result.status, result.error)


def test_the_op_graph_survives_the_analysis_round_trip():
    a = _analysis("norms_and_scans")
    back = Analysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back.op_graph == a.op_graph and back.op_graph.nodes[0].op == "aten::native_group_norm"


def _kept(strategy: str, *, exact: bool) -> KernelHint:
    return KernelHint(
        kernel_id="kbk_1", code="class ModelNew: pass\n", strategy=strategy, params={}, speedup=1.8, workload_name="other",
        similarity=0.95, same_workload=exact, close=exact, exact=exact,
    )  # fmt: skip


def test_a_kept_kernel_candidate_is_reused_only_on_its_own_workload(interpret, tmp_path):
    path = tmp_path / "w.py"
    shutil.copy(WORKLOADS / "softmax_rows.py", path)
    ctx = planning_context(path, _analysis("softmax_rows"))
    ctx.kb = KBAdvice(kernels=[_kept(STRATEGY, exact=False)])
    plan, _ = OfflinePlanner().plan(ctx)
    assert plan.strategy == STRATEGY and plan.source == "offline", "a similar workload's shape-guarded code is not reused"
    ctx.kb = KBAdvice(kernels=[_kept(STRATEGY, exact=True)])
    assert OfflinePlanner().plan(ctx)[0].strategy == "kb_reuse"
