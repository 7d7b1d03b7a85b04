"""Memory layouts described by sizes and strides alone (no torch): shared by the strategist,
which reads them from the traced op graph, and the evaluator, which reads them from tensors."""

from __future__ import annotations

from collections.abc import Sequence


def dense_order(shape: Sequence[int], stride: Sequence[int]) -> list[int] | None:
    """The dimensions of size other than 1 in memory order, outermost first, where a tensor of
    ``shape`` and ``stride`` covers its elements once each without gaps (row-major in some order
    of its dimensions: channels-last, a transpose, any permutation), else None (a slice with
    gaps, a broadcast)."""
    order = sorted((d for d in range(len(shape)) if shape[d] != 1), key=lambda d: -stride[d])
    expected = 1
    for d in reversed(order):
        if stride[d] != expected:
            return None
        expected *= shape[d]
    return order
