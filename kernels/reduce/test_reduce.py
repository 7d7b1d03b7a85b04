"""Reductions against torch: every op over rows, over an inner axis and over everything, kept
dimensions, values with indices, the split path for few results, prologue and epilogue programs,
half precision, refusals."""

import pytest
import torch

from kernels.elementwise.kernel import KernelUnsupported
from kernels.elementwise.opcodes import EW_OPS
from kernels.reduce import kernel as reduce_module
from kernels.reduce.kernel import reduce, reduce_with_indices

X = torch.randn(4, 37, 6)
TORCH = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k),
    "mean": lambda x, d, k: x.mean(d, keepdim=k),
    "max": lambda x, d, k: x.amax(d, keepdim=k),
    "min": lambda x, d, k: x.amin(d, keepdim=k),
    "prod": lambda x, d, k: (x * 0.1 + 1).prod(d[0], keepdim=k),
    "argmax": lambda x, d, k: x.argmax(d[0], keepdim=k),
    "argmin": lambda x, d, k: x.argmin(d[0], keepdim=k),
    "norm1": lambda x, d, k: torch.linalg.vector_norm(x, 1, d, k),
    "norm2": lambda x, d, k: torch.linalg.vector_norm(x, 2, d, k),
    "norm_inf": lambda x, d, k: torch.linalg.vector_norm(x, float("inf"), d, k),
    "logsumexp": lambda x, d, k: torch.logsumexp(x, d, k),
}


@pytest.mark.parametrize("op", sorted(TORCH))
@pytest.mark.parametrize("dims, keepdim", [([2], False), ([1], True)])
def test_every_op_over_rows_and_inner_axes(op, dims, keepdim):
    x = X * 0.1 + 1 if op == "prod" else X
    want = TORCH[op](X, dims, keepdim)
    got = reduce(x, dims, op, keepdim)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["sum", "max", "norm2", "logsumexp"])
def test_several_and_all_dimensions(op):
    torch.testing.assert_close(reduce(X, [0, 1], op), TORCH[op](X, [0, 1], False), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(reduce(X, [], op), TORCH[op](X, list(range(3)), False), rtol=1e-5, atol=1e-5)


def test_values_with_indices():
    values, indices = reduce_with_indices(X, 1, "max", keepdim=True)
    want = X.max(1, keepdim=True)
    torch.testing.assert_close(values, want.values)
    assert torch.equal(indices, want.indices)


def test_first_index_of_ties():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0]])
    assert reduce(x, [1], "argmax").tolist() == [1]


@pytest.mark.parametrize("op", ["sum", "mean", "argmax", "argmin", "norm2", "max", "logsumexp"])
def test_the_split_path_for_few_results(monkeypatch, op):
    monkeypatch.setattr(reduce_module, "RD_SPLIT_MIN", 64)
    monkeypatch.setattr(reduce_module, "RD_FEW_RESULTS", 64)
    y = torch.randn(2, 4096)
    want = TORCH[op](y, [1], False)
    torch.testing.assert_close(reduce(y, [1], op), want, rtol=1e-5, atol=1e-5)
    if op == "sum":
        program = (EW_OPS["mul"].code, 0, 0, 4)
        scale = torch.randn(2)
        torch.testing.assert_close(reduce(y, [1], op, post=([scale], program, ())), want * scale, rtol=1e-5, atol=1e-5)


def test_prologue_and_epilogue():
    mask = torch.rand(4, 37, 6) > 0.5
    pre = ([mask], (EW_OPS["mul"].code, 0, 0, 4), ())
    post = ([], (EW_OPS["mul"].code, 0, 0, 8, EW_OPS["relu"].code, 0, 0, 0), (2.0,))
    got = reduce(X, [1], "sum", True, pre=pre, post=post)
    torch.testing.assert_close(got, torch.relu((X * mask).sum(1, keepdim=True) * 2), rtol=1e-5, atol=1e-5)


def test_bfloat16_accumulates_in_float32():
    x = torch.randn(8, 3000).bfloat16()
    got = reduce(x, [1], "sum")
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), x.float().sum(1), rtol=1e-2, atol=1e-1)


def test_refusals():
    with pytest.raises(KernelUnsupported, match="consecutive"):
        reduce(X, [0, 2], "sum")
    with pytest.raises(KernelUnsupported, match="epilogue"):
        reduce(X, [1], "argmax", post=([], (EW_OPS["relu"].code, 0, 0, 0), ()))
    with pytest.raises(KernelUnsupported):
        reduce(torch.arange(6), [0], "sum")
