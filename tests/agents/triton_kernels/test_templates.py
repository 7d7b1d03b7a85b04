"""Templates matched on traced graphs by structure: which regions each fixture gets, epilogue and
prologue chains, reversed scans, what a region may not do (checked for every template, the GEMM
helper's included), graphs the replay refuses, and what the measured wins remove."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from kernel_helpers import traced

from agents.strategist.triton_kernels import plan
from agents.strategist.triton_kernels.emit import NotReplayable, replay_problem
from agents.strategist.triton_kernels.plan import Measured, find_matches, kernel_candidate, measured_kinds
from agents.strategist.triton_kernels.templates import GraphView, MatchError, check_match
from services.worker.evaluator.tracing import trace_call
from kloom.opgraph import OpGraph


def _regions(name: str) -> dict[str, list[str]]:
    g = traced(name)
    found: dict[str, list[str]] = {}
    for m in find_matches(g, wins={}).matches:
        found.setdefault(m.template, []).append(",".join(g.nodes[i].op.split("::")[1] for i in sorted(m.nodes)))
    return found


@pytest.mark.parametrize(
    "name, expected",
    [
        ("softmax_rows", {"softmax": ["_softmax"]}),
        ("layernorm_affine", {"layer_norm": ["native_layer_norm"]}),
        ("sum_then_chain", {"reduction": ["sum,mul,gelu,tanh,add"]}),
        ("cross_entropy", {"cross_entropy": ["_log_softmax,nll_loss_forward"]}),
        ("argmax_dim", {"reduction": ["argmax"]}),
        ("triplet_margin", {"reduction": ["sub,add,norm,add,sub,clamp_min", "sub,add,norm", "mean"]}),
    ],
)
def test_each_family_is_matched_by_structure(name, expected):
    assert _regions(name) == expected


def test_norms_take_their_epilogues_and_scans_their_flips_and_masks():
    """``relu(gn(x)) * 2 + sigmoid(bn(x)) + x / norm(x)``: the batch norm's epilogue sums the three
    branches, computing the other two's elementwise ops from the values they start from (the group
    norm's output, ``x`` and the norm: side branches); one kernel fewer than the group norm's
    epilogue and a chain for the division, and the division's result never written."""
    regions = _regions("norms_and_scans")
    assert regions["layer_norm"] == ["native_group_norm"]
    assert regions["batch_norm"] == ["relu,mul,native_batch_norm,sigmoid,div,add,add"]
    assert sorted(regions["scan"]) == ["flip,cumsum,flip", "mul,cumsum"]
    assert regions["reduction"] == ["linalg_vector_norm"]
    assert "elementwise_chain" not in regions


def test_a_region_read_outside_or_overlapping_is_refused():
    g = traced("sum_then_chain")
    view = GraphView(g)
    good = find_matches(g, wins={}).matches[0]
    check_match(view, good)
    with pytest.raises(MatchError, match="not an output"):
        check_match(view, replace(good, outputs=()))
    with pytest.raises(MatchError, match="claimed"):
        check_match(view.with_claimed(frozenset({0})), good)
    mul = next(n.index for n in g.nodes if n.op == "aten::mul")
    with pytest.raises(MatchError, match="read outside"):
        check_match(view, replace(good, nodes=frozenset(i for i in good.nodes if i <= mul), outputs=()))


def test_an_in_place_write_to_an_input_is_not_fused():
    def step(x):
        x.relu_()
        return x * 2.0

    g = OpGraph.from_dict(trace_call(step, [torch.randn(4)])["op_graph"])
    ops = {m.template: sorted(m.nodes) for m in find_matches(g, wins={}).matches}
    assert ops == {"elementwise_chain": [1]}, "relu_ writes the caller's tensor: it is replayed, the mul fused"


def test_random_or_host_reading_steps_are_not_replayed():
    g = OpGraph.from_dict(trace_call(lambda x: x + torch.rand_like(x), [torch.randn(3)])["op_graph"])
    assert "random" in replay_problem(g)
    g = OpGraph.from_dict(trace_call(lambda x: x * float(x.sum()), [torch.randn(3)])["op_graph"])
    assert "host" in replay_problem(g)
    with pytest.raises(NotReplayable):
        kernel_candidate("", g, None, "x")


def test_measured_losses_remove_a_kind_and_unmeasured_kinds_stay(tmp_path, monkeypatch):
    wins = tmp_path / "wins.json"
    wins.write_text(json.dumps({"kinds": {"reduction": {"vs_inductor": 0.8, "wins": False}, "elementwise": {"vs_inductor": 1.3, "wins": True}}}))
    assert measured_kinds(wins) == {"reduction": Measured("reduction", 0.8, False), "elementwise": Measured("elementwise", 1.3, True)}
    monkeypatch.setattr(plan, "WINS_FILE", wins)
    found = find_matches(traced("norms_and_scans"))
    assert "reduction" in found.skipped and not any(m.kind == "reduction" for m in found.matches)
    assert any(m.kind == "scan" for m in found.matches), "a kind not measured yet is still used"
