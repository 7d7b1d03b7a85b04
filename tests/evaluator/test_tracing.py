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


def test_functional_collectives_are_named_as_the_calls_of_torch_distributed(tmp_path):
    """The same all-reduce through ``torch.distributed`` and through torch's functional
    collectives (what compiled and DTensor code calls) is one collective, ``allreduce``; the wait
    and autograd's wrapper around it move no data and are not collectives."""
    import os

    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from services.worker.evaluator.tracing import collective_name

    assert collective_name("c10d::allreduce_") == collective_name("_c10d_functional::all_reduce") == "allreduce"
    assert collective_name("_c10d_functional::reduce_scatter_tensor") == collective_name("c10d::_reduce_scatter_base_")
    assert collective_name("_c10d_functional::all_to_all_single") == collective_name("c10d::alltoall_base_")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        w = torch.randn(4, 4)

        def plain(x):
            y = x @ w
            dist.all_reduce(y)
            return torch.relu(y)

        def functional(x):
            return torch.relu(funcol.wait_tensor(funcol.all_reduce(x @ w, "sum", dist.group.WORLD)))

        a, b = trace_call(plain, [torch.randn(2, 4)]), trace_call(functional, [torch.randn(2, 4)])
    finally:
        dist.destroy_process_group()
    assert [c["op"] for c in a["collectives"]] == [c["op"] for c in b["collectives"]] == ["allreduce"]
    assert "matmul_then_collective:allreduce" in a["patterns"] and "matmul_then_collective:allreduce" in b["patterns"]
