"""Softmax and log-softmax against torch: rows read once, long rows (online two-pass), an inner
reduced axis, a fused epilogue, half-precision inputs, non-contiguous inputs, refusals."""

import pytest
import torch

from kernels.elementwise.kernel import KernelUnsupported
from kernels.elementwise.opcodes import EW_OPS
from kernels.softmax.kernel import softmax

CASES = [
    ((6, 37), 1),  # rows in registers, several per program
    ((3, 17000), -1),  # longer than one block: online maximum and sum, then a writing pass
    ((2, 5, 3, 4), 1),  # an inner reduced axis held whole
    ((2, 300, 3), 1),  # an inner reduced axis walked in tiles
    ((7, 4), 0),
]


@pytest.mark.parametrize("shape, dim", CASES)
@pytest.mark.parametrize("log", [False, True])
def test_matches_torch(shape, dim, log):
    x = torch.randn(shape) * 4
    want = torch.log_softmax(x, dim) if log else torch.softmax(x, dim)
    torch.testing.assert_close(softmax(x, dim, log=log), want, rtol=1e-5, atol=1e-6)


def test_half_precision_accumulates_in_float32():
    x = (torch.randn(4, 2000) * 8).bfloat16()
    got = softmax(x, 1)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), torch.softmax(x.float(), 1), rtol=2e-2, atol=1e-3)


def test_non_contiguous_input_and_fused_epilogue():
    x = torch.randn(9, 6).t()  # rows of the transposed view
    scale = torch.randn(9)
    program = (EW_OPS["mul"].code, 0, 0, 4, EW_OPS["add"].code, 0, 0, 8)
    got = softmax(x, 1, post=([scale], program, (0.5,)))
    torch.testing.assert_close(got, torch.softmax(x, 1) * scale + 0.5, rtol=1e-5, atol=1e-6)


def test_refuses_integer_input():
    with pytest.raises(KernelUnsupported):
        softmax(torch.arange(6).reshape(2, 3), 1)


@pytest.mark.parametrize("shape, dim", CASES)
def test_a_prologue_scales_and_masks_before_the_softmax(shape, dim):
    """Attention's ``softmax(masked_fill(s * scale, mask, -inf))`` in one kernel: the prologue
    runs on the loaded values in every path (rows in registers, the online passes, inner axes),
    a broadcast mask included; a row masked whole gives NaN as torch's does."""
    x = torch.randn(shape)
    mask = torch.rand(shape[-1]) > 0.6  # broadcast along every dimension but the last
    c = EW_OPS
    program = (c["mul"].code, 0, 0, 8, c["select_nz"].code, 1, 4, 9, c["fill_nan"].code, 0, 1, 0)
    got = softmax(x, dim, pre=([mask], program, (0.125, float("-inf"))))
    want = torch.softmax((x * 0.125).masked_fill(mask, float("-inf")), dim)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
