"""The hybrid kernel candidate: inductor compiles the replay and kloom's regions are opaque
operators in it. Checked in process (two candidates in one process keep their own kernels) and
under the real evaluator."""

from __future__ import annotations

import json
import shutil
import sys
import types

import pytest
import torch
from kernel_helpers import WORKLOADS, load_workload, traced

from agents.analysis import build_analysis
from agents.strategist.triton_kernels import plan as kernel_plan
from agents.strategist.triton_kernels.option import COMPILED, COMPILED_GRAPH, GRAPHED, PLAIN, kernel_candidate_for, kernel_offers
from kloom.static_check import check_candidate

from .test_strategy import _analysis


@pytest.fixture
def unmeasured(monkeypatch, tmp_path):
    """Every template offered, as before any GPU measurement."""
    monkeypatch.setattr(kernel_plan, "WINS_FILE", tmp_path / "no_wins.json")


def _candidate(name: str, mode: str | None = "default", graphed: list[int] | None = None) -> str:
    return kernel_plan.kernel_candidate((WORKLOADS / f"{name}.py").read_text(), traced(name), None, "test", mode, graphed)


def _load(code: str, module_name: str):
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module  # inductor finds the compiled function's globals by module name
    exec(compile(code, module_name, "exec"), module.__dict__)
    return module


def _flat(out) -> torch.Tensor:
    return torch.cat([t.flatten().double() for t in (out if isinstance(out, (list, tuple)) else [out])])


def test_two_compiled_candidates_in_one_process_keep_their_own_kernels(interpret, unmeasured):
    # A custom operator registered again under a taken name silently replaces the first one's
    # implementation: each import must take names of its own.
    models = {}
    for i, name in enumerate(["sum_then_chain", "cross_entropy"]):
        code = _candidate(name)
        assert check_candidate(code) == [], name
        assert "torch.library.custom_op" in code and "torch.compile(self._kl_replay" in code
        workload = load_workload(name)
        torch.manual_seed(0)
        models[name] = (workload, workload.Model(*workload.get_init_inputs()), _load(code, f"_kl_hybrid_{i}").ModelNew(*workload.get_init_inputs()))
    for name, (workload, reference, candidate) in models.items():  # the first again, after the second registered
        candidate.load_state_dict(reference.state_dict())
        inputs = workload.get_inputs()
        assert torch.allclose(_flat(candidate(*inputs)), _flat(reference(*inputs)), atol=1e-5, rtol=1e-5), name


def test_offered_beside_the_plain_replay_only_where_operators_are_left_for_inductor(interpret, unmeasured):
    offers = {o.params["wrapper"]: o for o in kernel_offers(_analysis("sum_then_chain"))}
    assert set(offers) == {PLAIN}, "the kernels take every operator: nothing is left for inductor to fuse"
    offers = {o.params["wrapper"]: o for o in kernel_offers(_analysis("linear_softmax"))}
    assert set(offers) == {PLAIN, COMPILED}
    assert offers[COMPILED].params["compile_mode"] == "default" and "compiled by inductor" in offers[COMPILED].rationale


@pytest.mark.slow
def test_the_hybrid_candidate_is_correct_under_the_real_evaluator(interpreted_evaluator, interpret, unmeasured, tmp_path):
    path = tmp_path / "w.py"
    shutil.copy(WORKLOADS / "linear_softmax.py", path)
    traces = interpreted_evaluator.analyze(path, world_size=1)
    analysis = build_analysis(traces, family="single_gpu", world_size=1, device="cpu", baseline=None)
    offer = next(o for o in kernel_offers(analysis) if o.params["wrapper"] == COMPILED)
    code = kernel_candidate_for(path.read_text(), analysis, offer.params, "test")
    candidate = tmp_path / "candidate.py"
    candidate.write_text(code)
    result = interpreted_evaluator.evaluate(path, candidate, world_size=1)
    assert result.status == "correct", (result.status, result.error)


def test_the_hybrid_keeps_only_kinds_that_beat_inductor_by_a_margin(interpret, monkeypatch, tmp_path):
    # Inside a compiled step each region competes with inductor's code for it: a kind measured
    # barely faster than inductor (elementwise 1.07x) is left to inductor there, not in the plain replay.
    wins = tmp_path / "wins.json"
    kinds = {"elementwise": {"vs_inductor": 1.07, "wins": True}, "softmax": {"vs_inductor": 1.6, "wins": True}}
    wins.write_text(json.dumps({"kinds": kinds}))
    monkeypatch.setattr(kernel_plan, "WINS_FILE", wins)
    offers = {o.params["wrapper"]: o for o in kernel_offers(_analysis("linear_softmax"))}
    assert offers[PLAIN].params["templates"] == ["elementwise_chain", "softmax"]
    assert offers[COMPILED].params["templates"] == ["softmax"]
    kinds["softmax"]["vs_inductor"] = 1.05
    wins.write_text(json.dumps({"kinds": kinds}))
    assert {o.params["wrapper"] for o in kernel_offers(_analysis("linear_softmax"))} == {PLAIN}, "no region left worth an opaque operator"


def test_on_a_gpu_the_compiled_step_is_also_offered_in_a_cuda_graph(interpret, unmeasured):
    """Inductor's fusion around the kernels and no launch from Python (what compile_cuda_graph is
    for inductor's code alone): offered where the hybrid is and the step can be captured, ahead of
    the graphed plain replay by what inductor has to fuse."""
    a = _analysis("linear_softmax", device="cuda")
    a.reference_ms = len(a.op_graph.nodes) * 0.008
    offers = {o.params["wrapper"]: o for o in kernel_offers(a)}
    assert set(offers) == {PLAIN, COMPILED, GRAPHED, COMPILED_GRAPH}
    graph = offers[COMPILED_GRAPH]
    assert graph.params["templates"] == offers[COMPILED].params["templates"] and graph.params["compile_mode"] == "default"
    assert "compiled step captured in one CUDA graph" in graph.rationale and graph.score > offers[GRAPHED].score
    a.host_syncs = 1
    assert COMPILED_GRAPH not in {o.params["wrapper"] for o in kernel_offers(a)}, "a host sync cannot be captured"
    assert COMPILED_GRAPH not in {o.params["wrapper"] for o in kernel_offers(_analysis("linear_softmax"))}, "no graph off a GPU"
    assert COMPILED_GRAPH not in {o.params["wrapper"] for o in kernel_offers(_analysis("sum_then_chain", device="cuda"))}, (
        "nothing left for inductor: the graphed plain replay is the same candidate")


def test_the_compiled_and_graphed_candidate_computes_the_reference(interpret, unmeasured):
    """Off a GPU the graph runtime runs the compiled step itself (the capture is the GPU's): the
    code it writes, the embedded runtime and the compiled step are what this checks."""
    code = _candidate("linear_softmax", "default", graphed=[])
    assert check_candidate(code) == []
    assert "_kloom_graphed(self._kl_graphs, self._kl_step, args, 3, [])" in code and "torch.compile(self._kl_replay" in code
    workload = load_workload("linear_softmax")
    torch.manual_seed(0)
    reference = workload.Model(*workload.get_init_inputs())
    candidate = _load(code, "_kl_hybrid_graphed").ModelNew(*workload.get_init_inputs())
    candidate.load_state_dict(reference.state_dict())
    for _ in range(2):
        inputs = workload.get_inputs()
        assert torch.allclose(_flat(candidate(*inputs)), _flat(reference(*inputs)), atol=1e-5, rtol=1e-5)
