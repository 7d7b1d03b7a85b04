"""The op graph the tracer records: operators in order with their schema arguments, tensor ids
for inputs, parameters (by attribute path), buffers and results, versions of tensors written in
place, views sharing storage, the step's outputs, a JSON round trip, and the graph marked
incomplete where the recorder stopped."""

from __future__ import annotations

import json

import torch
import torch.nn as nn
import torch.nn.functional as F

from kloom.opgraph import OpGraph
from services.worker.evaluator import graph_recorder
from services.worker.evaluator.tracing import trace_call


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 6)
        self.norm = nn.LayerNorm(6)
        self.scale = torch.full((6,), 0.5)  # a plain tensor attribute
        self.register_buffer("shift", torch.zeros(6))

    def forward(self, x, factor):
        y = self.norm(self.linear(x)) * self.scale + self.shift
        y = y * factor
        z = y.view(2, 3, 6)
        z.relu_()
        return y, torch.softmax(z, dim=-1)


def _graph(model, inputs) -> OpGraph:
    return OpGraph.from_dict(json.loads(json.dumps(trace_call(model, inputs)["op_graph"])))


def test_operators_arguments_and_leaves():
    g = _graph(Block(), [torch.randn(6, 8), 3.0])
    ops = [n.op for n in g.nodes]
    assert ops[-2:] == ["aten::relu_", "aten::_softmax"]
    assert "aten::native_layer_norm" in ops and "aten::view" in ops
    leaves = {l.name or f"input{l.position}": l.kind for l in g.leaves}
    assert leaves == {"input0": "input", "linear.weight": "param", "linear.bias": "param", "norm.weight": "param", "norm.bias": "param", "shift": "buffer", "scale": "attr"}
    assert g.inputs[1] == 3.0 and g.training is True
    norm = next(n for n in g.nodes if n.op == "aten::native_layer_norm")
    assert norm.arg("normalized_shape") == {"list": [6]} and norm.arg("eps") == 1e-5
    assert norm.returns_tuple and len(norm.outputs) == 3
    mul = next(n for n in g.nodes if n.op == "aten::mul" and n.arg("other") == 3.0)
    assert g.tensors[mul.outputs[0]].shape == (6, 6)


def test_in_place_writes_make_new_versions_and_views_share_storage():
    g = _graph(Block(), [torch.randn(6, 8), 3.0])
    view = next(n for n in g.nodes if n.op == "aten::view")
    relu = next(n for n in g.nodes if n.op == "aten::relu_")
    before, after = relu.writes[0]
    assert before == view.outputs[0] and relu.outputs == (after,)
    softmax = g.nodes[-1]
    assert softmax.arg("self") == {"tensor": after}, "readers after an in-place write read the new version"
    assert g.tensors[after].storage == g.tensors[view.outputs[0]].storage == g.tensors[view.arg("self")["tensor"]].storage
    assert g.producer()[after] == relu.index


def test_outputs_are_encoded_with_their_structure():
    g = _graph(Block(), [torch.randn(6, 8), 3.0])
    assert g.outputs["tuple"] is True and len(g.outputs["list"]) == 2
    assert g.output_ids() == {g.outputs["list"][0]["tensor"], g.nodes[-1].outputs[0]}


def test_a_long_step_is_recorded_as_incomplete(monkeypatch):
    monkeypatch.setattr(graph_recorder, "MAX_NODES", 3)
    g = _graph(lambda x: ((x + 1) * 2 - 3) / 4, [torch.randn(3)])
    assert len(g.nodes) == 3 and not g.complete and "more than 3 operators" in g.reason


def test_a_tensor_from_outside_the_module_is_named_unless_small():
    outside = torch.randn(100)
    g = _graph(lambda x: x + outside, [torch.randn(100)])
    assert not g.complete and "neither an input nor an attribute" in g.reason
    small = torch.tensor([1.0, 2.0])
    g = _graph(lambda x: F.relu(x * small), [torch.randn(2)])
    assert g.complete and any(l.kind == "constant" and l.values == [1.0, 2.0] for l in g.leaves)
