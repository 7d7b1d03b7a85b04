"""kloom.layout: which sizes and strides cover their elements once each, in which order."""

from __future__ import annotations

import pytest
import torch

from kloom.layout import dense_order


@pytest.mark.parametrize(
    "t, order",
    [
        (torch.empty(2, 3, 4), [0, 1, 2]),
        (torch.empty(2, 3, 4, 5).contiguous(memory_format=torch.channels_last), [0, 2, 3, 1]),
        (torch.empty(6, 7).t(), [1, 0]),
        (torch.empty(4, 1, 5).permute(2, 1, 0), [2, 0]),  # a size-1 dimension has no place
        (torch.empty(6, 8)[:, ::2], None),  # gaps
        (torch.empty(5, 1).expand(5, 4), None),  # a broadcast reads elements twice
        (torch.empty(3, 8)[:, 2:], None),
    ],
)
def test_the_memory_order_of_a_dense_layout_and_none_for_the_rest(t, order):
    assert dense_order(t.shape, t.stride()) == order
