"""Cross-entropy against torch: every reduction, ignored rows, rows longer than a chunk, half
precision, and a target out of range giving NaN instead of a plausible loss."""

import pytest
import torch
import torch.nn.functional as F

from kernels.cross_entropy.kernel import cross_entropy
from kernels.elementwise.kernel import KernelUnsupported


@pytest.mark.parametrize("rows, classes", [(7, 10), (5, 3000)])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_matches_torch(rows, classes, reduction):
    x, t = torch.randn(rows, classes) * 3, torch.randint(0, classes, (rows,))
    t[1] = -100
    torch.testing.assert_close(cross_entropy(x, t, reduction), F.cross_entropy(x, t, reduction=reduction), rtol=1e-5, atol=1e-5)


def test_bfloat16_logits():
    x, t = (torch.randn(6, 50) * 2).bfloat16(), torch.randint(0, 50, (6,))
    got = cross_entropy(x, t)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), F.cross_entropy(x.float(), t), rtol=2e-2, atol=2e-2)


def test_a_target_out_of_range_is_nan():
    x, t = torch.randn(3, 5), torch.tensor([0, 7, 1])
    assert torch.isnan(cross_entropy(x, t, "none")[1])
    assert torch.isnan(cross_entropy(x, t))


def test_refusals():
    with pytest.raises(KernelUnsupported):
        cross_entropy(torch.randn(2, 3, 4), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(KernelUnsupported):
        cross_entropy(torch.randn(2, 3), torch.zeros(2))
