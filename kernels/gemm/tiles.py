"""Pieces every tiled product kernel of the library shares (``matmul.py``, the convolutions in
``kernels/conv``): the order programs take their output tiles in, and one multiply-accumulate
step at the precision asked for. Imports only Triton."""

import triton
import triton.language as tl


@triton.jit
def gemm_tile_order(pid, grid_m, grid_n, GROUP_M: tl.constexpr):
    """Program ``pid``'s tile ``(pid_m, pid_n)`` in group-M order: consecutive programs walk
    ``GROUP_M`` row tiles of one column tile, sharing that column panel of B while it is in L2."""
    width = GROUP_M * grid_n
    first_m = (pid // width) * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return pid_m, pid_n


@triton.jit
def gemm_mma(a, b, acc, UPCAST: tl.constexpr, F32X3: tl.constexpr):
    """``acc + a @ b`` in float32. Float32 operands in full precision on the CUDA cores, or with
    ``F32X3`` as three TF32 tensor-core products of split operands (``matmul.GEMM_PRECISIONS``);
    16-bit floats on the tensor cores. ``UPCAST``: the Triton interpreter multiplies 16-bit floats
    wrongly; their products are exact in float32, so the float32 product of the same values is
    the same result."""
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if F32X3:
        acc = tl.dot(a, b, acc, input_precision="tf32x3", out_dtype=tl.float32)
    else:
        acc = tl.dot(a, b, acc, input_precision="ieee", out_dtype=tl.float32)
    return acc
