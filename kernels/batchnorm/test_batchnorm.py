"""BatchNorm as torch computes it: training statistics (and the running statistics it updates),
inference with running statistics, no affine, the (1, N*C, ...) view InstanceNorm makes, an
epilogue, half precision."""

import pytest
import torch
import torch.nn.functional as F

from kernels.batchnorm.kernel import batch_norm, bn_stats
from kernels.elementwise.kernel import KernelUnsupported
from kernels.elementwise.opcodes import EW_OPS


@pytest.mark.parametrize("shape", [(3, 4, 5, 6), (2, 3, 7), (5, 2)])
def test_training_statistics_and_running_update(shape):
    c = shape[1]
    x = torch.randn(shape) * 2 + 3
    w, b = torch.randn(c), torch.randn(c)
    mean, var = torch.randn(c), torch.rand(c) + 0.5
    mine, theirs = (mean.clone(), var.clone()), (mean.clone(), var.clone())
    got = batch_norm(x, w, b, *mine, True, 0.1, 1e-5)
    want = F.batch_norm(x, *theirs, w, b, True, 0.1, 1e-5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mine[0], theirs[0])
    torch.testing.assert_close(mine[1], theirs[1])



def test_statistics_over_several_partials_merge_as_torch_computes_them():
    """More than ``BN_RANGE`` values a channel: several programs' partial statistics (the last one
    short, its lanes past the end adding nothing) merged by ``_bn_merge_kernel``."""
    x = torch.randn(3, 2, 50000) * 0.5 + 4  # 150000 values a channel: three partials, the last short
    mean, var = bn_stats(x)
    torch.testing.assert_close(mean, x.double().mean(dim=(0, 2)).float(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(var, x.double().var(dim=(0, 2), unbiased=False).float(), rtol=1e-5, atol=1e-6)

def test_inference_uses_running_statistics():
    x, w, b = torch.randn(3, 4, 5), torch.randn(4), torch.randn(4)
    mean, var = torch.randn(4), torch.rand(4) + 0.5
    torch.testing.assert_close(batch_norm(x, w, b, mean, var, False, 0.1, 1e-5), F.batch_norm(x, mean, var, w, b, False, 0.1, 1e-5))


def test_instance_norm_view_without_affine_or_running_statistics():
    x = torch.randn(2, 3, 4, 5)
    got = batch_norm(x.view(1, 6, 4, 5), None, None, None, None, True, 0.1, 1e-5).view(2, 3, 4, 5)
    torch.testing.assert_close(got, F.instance_norm(x), rtol=1e-5, atol=1e-5)


def test_epilogue_and_bfloat16():
    x = torch.randn(4, 3, 8).bfloat16()
    got = batch_norm(x, None, None, None, None, True, 0.1, 1e-5, post=([], (EW_OPS["tanh"].code, 0, 0, 0), ()))
    want = torch.tanh(F.batch_norm(x.float(), None, None, training=True))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


def test_refusals():
    with pytest.raises(KernelUnsupported, match="more than one value"):
        batch_norm(torch.randn(1, 3), None, None, None, None, True, 0.1, 1e-5)
    with pytest.raises(KernelUnsupported, match="running statistics"):
        batch_norm(torch.randn(4, 3), None, None, None, None, False, 0.1, 1e-5)
