"""LayerNorm, RMSNorm, GroupNorm and InstanceNorm against torch, with and without affine
parameters, rows in registers and rows walked twice (Welford), half precision, an epilogue."""

import pytest
import torch
import torch.nn.functional as F

from kernels.elementwise.kernel import KernelUnsupported
from kernels.elementwise.opcodes import EW_OPS
from kernels.layernorm import kernel as layernorm_module
from kernels.layernorm.kernel import group_norm, layer_norm, rms_norm


@pytest.mark.parametrize("shape, ndim", [((6, 40), 1), ((3, 17000), 1), ((2, 3, 4, 5), 2)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, ndim, affine):
    x = torch.randn(shape) * 3 + 2  # an offset mean: one-pass variance would lose digits
    normalized = shape[-ndim:]
    w, b = (torch.randn(normalized), torch.randn(normalized)) if affine else (None, None)
    torch.testing.assert_close(layer_norm(x, ndim, w, b, 1e-5), F.layer_norm(x, normalized, w, b, 1e-5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 40), (2, 17000)])
def test_rms_norm(shape):
    x, w = torch.randn(shape), torch.randn(shape[-1])
    torch.testing.assert_close(rms_norm(x, 1, w, 1e-6), F.rms_norm(x, shape[-1:], w, 1e-6), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, groups", [((2, 6, 5, 7), 3), ((2, 4, 90, 100), 2), ((3, 4, 10), 4)])
def test_group_and_instance_norm(shape, groups):
    x = torch.randn(shape) + 1
    w, b = torch.randn(shape[1]), torch.randn(shape[1])
    torch.testing.assert_close(group_norm(x, groups, w, b), F.group_norm(x, groups, w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(group_norm(x, shape[1]), F.instance_norm(x), rtol=1e-5, atol=1e-5)


def test_bfloat16_and_epilogue():
    x = torch.randn(4, 64).bfloat16()
    program = (EW_OPS["relu"].code, 0, 0, 0, EW_OPS["mul"].code, 0, 0, 8)
    got = layer_norm(x, 1, post=([], program, (2.0,)))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), torch.relu(F.layer_norm(x.float(), (64,))) * 2, rtol=2e-2, atol=2e-2)


def test_refusals():
    with pytest.raises(KernelUnsupported, match="divisible"):
        group_norm(torch.randn(2, 6, 4), 4)
    with pytest.raises(KernelUnsupported, match="weight"):
        layer_norm(torch.randn(2, 6), 1, torch.randn(5))


def test_few_long_rows_are_split(monkeypatch):
    monkeypatch.setattr(layernorm_module, "LN_SPLIT_MIN", 1000)
    x = torch.randn(3, 4, 50, 60) * 2 + 1
    w, b = torch.randn(4, 50, 60), torch.randn(4, 50, 60)
    torch.testing.assert_close(layer_norm(x, 3, w, b), F.layer_norm(x, (4, 50, 60), w, b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rms_norm(x, 3, w, 1e-6), F.rms_norm(x, (4, 50, 60), w, 1e-6), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(group_norm(x, 2, w[:, 0, 0], b[:, 0, 0]), F.group_norm(x, 2, w[:, 0, 0], b[:, 0, 0]), rtol=1e-5, atol=1e-5)
