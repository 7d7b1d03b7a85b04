"""The projection of one flat piece of a leaf on a GPU, in one Triton kernel.

``projection.Projector`` on the CPU hashes every element's index with a handful of int64 tensor
operations per chunk; on an H100 that took 80 ms per call for a 1 GiB output (110 times a copy
of it) and 30 MiB of scratch. Here each program reads a tile of the piece once, hashes the
indices in registers with the same function (``projection.signs``: 32-bit arithmetic, where a
product wraps as ``& 0xFFFFFFFF`` does there) and writes six float64 partial sums (p, p2 and the
power sums s1 .. s4 of ``projection.Projector.leaf``); the partials are summed on the device.
Scratch: six float64 per tile. The float64 arithmetic is a dozen operations per element read,
far below what the device does in the time its memory delivers the element: still memory-bound.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kloom.layout import dense_order

from .projection import _M1, _M2

BLOCK = 4096
#: dtypes read as they are (anything else is converted to float32 first: fp8 and the like).
NATIVE = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32,
          torch.int64}


@triton.jit
def _sums(x, h, out, M1: tl.constexpr, M2: tl.constexpr):
    """Write the six sums of the elements ``x`` (float64) with the index words ``h`` (uint32,
    already xor-ed with the key) to ``out``: the signs are the top two bits of ``h``'s avalanche."""
    h = h ^ (h >> 16)
    h = h * M1
    h = h ^ (h >> 15)
    h = h * M2
    h = h ^ (h >> 16)
    h = h * M1
    h = h ^ (h >> 15)
    r = 1.0 - 2.0 * (h >> 31).to(tl.float64)
    r2 = 1.0 - 2.0 * ((h >> 30) & 1).to(tl.float64)
    a = tl.abs(x)  # masked elements are 0: they add nothing to any sum
    x2 = x * x
    tl.store(out, tl.sum(r * x, axis=0))
    tl.store(out + 1, tl.sum(r2 * x2, axis=0))
    tl.store(out + 2, tl.sum(a, axis=0))
    tl.store(out + 3, tl.sum(x2, axis=0))
    tl.store(out + 4, tl.sum(a * x2, axis=0))
    tl.store(out + 5, tl.sum(x2 * x2, axis=0))


# ``n``, ``low_start`` and ``key`` change from call to call: specialised (Triton's "divisible by 16"
# and "equals 1" variants), a key that happened to be a multiple of 16 compiled a second kernel
# inside a timed block, 300-700 ms at once on both sides' ranks (2xH200, benchmarks/gpu/clock_case.py);
# ``project_piece`` passes them as int32 (a key from 2**31 up compiled an int64 variant likewise).
@triton.jit(do_not_specialize=["n", "low_start", "key"])
def _project_kernel(x_ptr, out_ptr, n, low_start, key, M1: tl.constexpr, M2: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.float64)
    h = ((offs + low_start) & 0xFFFFFFFF).to(tl.uint32) ^ key.to(tl.uint32)
    _sums(x, h, out_ptr + pid * 6, M1, M2)


# A leaf stored densely in another order of its dimensions (channels-last, a transpose): read in
# memory order, each element's row-major index computed from its memory offset through at most
# four (merged) dimensions. Every size and stride is a runtime value, unspecialised: one compiled
# kernel per dtype whatever the layout, so none compiles inside a timed block.
@triton.jit(do_not_specialize=["n", "key", "s1", "s2", "s3", "l0", "l1", "l2", "l3"])
def _project_dense_kernel(x_ptr, out_ptr, n, key, s1, s2, s3, l0, l1, l2, l3, M1: tl.constexpr, M2: tl.constexpr,
                          BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # n < 2**31
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0).to(tl.float64)
    c3 = offs % s3
    rest = offs // s3
    c2 = rest % s2
    rest = rest // s2
    c1 = rest % s1
    c0 = rest // s1
    j = c0 * l0 + c1 * l1 + c2 * l2 + c3 * l3
    _sums(x, j.to(tl.uint32) ^ key.to(tl.uint32), out_ptr + pid * 6, M1, M2)


def _int32(value: int) -> int:
    """The signed 32-bit integer with the bits of ``value`` (0 .. 2**32 - 1)."""
    return value - (1 << 32) if value >= 1 << 31 else value


def _readable(x: torch.Tensor) -> torch.Tensor:
    """``x`` in a dtype the kernels read (bool as bytes; fp8 and the like as float32, same strides)."""
    if x.dtype == torch.bool:
        return x.view(torch.uint8)
    return x if x.dtype in NATIVE else x.to(torch.float32)


def project_piece(x: torch.Tensor, low_start: int, key: int) -> torch.Tensor:
    """(p, p2, s1, s2, s3, s4), float64 on x's device, of a flat contiguous piece whose first element has the
    low 32 index bits ``low_start`` (the piece must not cross a multiple of 2**32) and whose
    indices' upper bits hash to ``key``."""
    x = _readable(x)
    n = x.numel()
    tiles = triton.cdiv(n, BLOCK)
    partial = torch.empty(tiles, 6, dtype=torch.float64, device=x.device)
    # Passed as signed 32-bit values of the same bits: Triton types an int argument by its value
    # (int64 from 2**31 up), so half the keys would compile a kernel of their own in a timed block.
    # The kernel's arithmetic is modulo 2**32 either way.
    _project_kernel[(tiles,)](x, partial, n, _int32(low_start), _int32(key), M1=_M1, M2=_M2, BLOCK=BLOCK, num_warps=8)
    return partial.sum(0)


#: Merged dimensions the dense kernel decodes; a layout needing more is read in row-major pieces.
DENSE_DIMS = 4


def dense_layout(t: torch.Tensor) -> tuple[list[int], list[int]] | None:
    """For a tensor whose elements fill one dense span of memory in some order of its dimensions
    (channels-last, a transpose, any permutation), its dimensions in memory order, outermost first,
    each with its row-major stride (dimensions adjacent in both orders merged; padded in front to
    ``DENSE_DIMS`` with size 1): (sizes, row-major strides). None where the elements do not fill
    one dense span (a slice with gaps, a broadcast), where more than ``DENSE_DIMS`` dimensions
    remain, or where there are 2**31 elements or more."""
    n = t.numel()
    if n == 0 or n >= 1 << 31:
        return None
    order = dense_order(t.shape, t.stride())
    if order is None:
        return None
    row, acc = [0] * t.dim(), 1
    for d in range(t.dim() - 1, -1, -1):
        row[d], acc = acc, acc * t.shape[d]
    sizes: list[int] = []
    strides: list[int] = []
    for d in order:
        if strides and strides[-1] == row[d] * t.shape[d]:
            sizes[-1], strides[-1] = sizes[-1] * t.shape[d], row[d]
        else:
            sizes.append(t.shape[d])
            strides.append(row[d])
    if len(sizes) > DENSE_DIMS:
        return None
    pad = DENSE_DIMS - len(sizes)
    return [1] * pad + sizes, [0] * pad + strides


def project_dense(t: torch.Tensor, layout: tuple[list[int], list[int]], key: int) -> torch.Tensor:
    """``project_piece``'s numbers for the whole leaf ``t`` (row-major indices from 0, ``key`` for
    their upper bits, which are 0), read in memory order: ``layout`` is ``dense_layout(t)``. A
    channels-last leaf read in row-major pieces gathered one element per 32-byte sector; the
    candidate's clock check then counted the judge's slow reads against it (an honest cuDNN
    channels-last candidate rejected on an H100: 5.6 ms a call of a 0.8 GB output)."""
    x = _readable(t)
    n = x.numel()
    flat = x.as_strided((n,), (1,))  # the same storage and offset, in memory order
    sizes, strides = layout
    tiles = triton.cdiv(n, BLOCK)
    partial = torch.empty(tiles, 6, dtype=torch.float64, device=x.device)
    _project_dense_kernel[(tiles,)](flat, partial, n, _int32(key), sizes[1], sizes[2], sizes[3], *strides,
                                    M1=_M1, M2=_M2, BLOCK=BLOCK, num_warps=8)
    return partial.sum(0)
