"""Tile order shared by the comm kernels' GEMMs, as a Triton device function."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def swizzle(tile, num_m, num_n, GROUP_M: tl.constexpr):
    """(row tile, column tile) of linear tile ``tile``: ``GROUP_M`` row tiles at a time sweep the
    columns together, so the B tiles they share stay in L2; rows stay in the order given (the
    comm kernels' rotated order), group by group."""
    in_group = GROUP_M * num_n
    first_m = (tile // in_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + (tile % in_group) % group_rows, (tile % in_group) // group_rows
