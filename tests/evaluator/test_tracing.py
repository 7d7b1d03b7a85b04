"""The tracer in-process: a step that builds tensor subclasses (a plain subclass, one with its own
``__new__``, ``_make_subclass``, ``as_subclass``, ``CausalBias``) is traced, the operators it runs
are recorded, and ``torch.Tensor.__new__`` is what it was afterwards, even when the step raises."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from services.worker.evaluator.tracing import trace_call


class Plain(torch.Tensor):
    pass


class OwnNew(torch.Tensor):
    @staticmethod
    def __new__(cls, data):
        return torch.Tensor._make_subclass(cls, data)


def _step(x):
    p = torch.nn.Parameter(x * 2)
    w = OwnNew(x + 1).as_subclass(torch.Tensor)
    v = x.as_subclass(Plain).as_subclass(torch.Tensor)
    Plain()  # built by Tensor.__new__: the case the recorder alone cannot follow
    q = x.reshape(1, 1, 2, 2)
    k = torch.cat([q, q], dim=2)
    attention = F.scaled_dot_product_attention(q, k, k, attn_mask=causal_lower_right(2, 4))
    return (p + w + v).sum() + attention.sum()


def test_a_step_that_builds_subclasses_is_traced():
    before = vars(torch.Tensor).get("__new__")
    trace = trace_call(_step, [torch.randn(4)])
    assert {"aten::mul", "aten::add", "aten::cat", "aten::sum"} <= set(trace["ops"])
    assert trace["n_attention"] == 1
    assert vars(torch.Tensor).get("__new__") is before
    assert type(Plain()) is Plain and torch.Tensor([1.0]).tolist() == [1.0]


def test_tensor_new_is_restored_when_the_step_raises():
    before = vars(torch.Tensor).get("__new__")

    def broken(x):
        Plain()
        raise ValueError("the step failed")

    with pytest.raises(ValueError, match="the step failed"):
        trace_call(broken, [torch.randn(2)])
    assert vars(torch.Tensor).get("__new__") is before
