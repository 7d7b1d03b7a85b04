"""Cumulative sums and products against torch: rows longer than a chunk, an inner axis, reversed
scans, a masked prologue, an epilogue, half precision."""

import pytest
import torch

from kernels.elementwise.kernel import KernelUnsupported
from kernels.elementwise.opcodes import EW_OPS
from kernels.scan.kernel import scan


@pytest.mark.parametrize("shape, dim", [((3, 2500), 1), ((4, 37, 6), 1), ((5, 8), 0)])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(shape, dim, reverse):
    x = torch.randn(shape)
    want = x.flip(dim).cumsum(dim).flip(dim) if reverse else x.cumsum(dim)
    torch.testing.assert_close(scan(x, dim, "sum", reverse), want, rtol=1e-5, atol=2e-4)


@pytest.mark.parametrize("shape, dim", [((3, 2500), 1), ((4, 37, 6), 1)])
def test_cumprod(shape, dim):
    x = torch.rand(shape) * 0.02 + 0.995
    torch.testing.assert_close(scan(x, dim, "prod"), x.cumprod(dim), rtol=1e-4, atol=1e-6)


def test_masked_prologue_and_epilogue():
    x, mask = torch.randn(3, 2500), torch.rand(3, 2500) > 0.5
    pre = ([mask], (EW_OPS["mul"].code, 0, 0, 4), ())
    post = ([], (EW_OPS["tanh"].code, 0, 0, 0), ())
    torch.testing.assert_close(scan(x, 1, pre=pre, post=post), torch.tanh((x * mask).cumsum(1)), rtol=1e-5, atol=2e-4)


def test_bfloat16():
    x = torch.randn(4, 300).bfloat16()
    got = scan(x, 1)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), x.float().cumsum(1), rtol=2e-2, atol=1e-1)


def test_refusals():
    with pytest.raises(KernelUnsupported):
        scan(torch.arange(5), 0)
    with pytest.raises(KernelUnsupported):
        scan(torch.randn(5), 0, "max")
