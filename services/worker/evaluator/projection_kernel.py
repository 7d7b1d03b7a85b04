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

from .projection import _M1, _M2

BLOCK = 4096
#: dtypes read as they are (anything else is converted to float32 first: fp8 and the like).
NATIVE = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int16, torch.int32,
          torch.int64}


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
    out = out_ptr + pid * 6
    tl.store(out, tl.sum(r * x, axis=0))
    tl.store(out + 1, tl.sum(r2 * x2, axis=0))
    tl.store(out + 2, tl.sum(a, axis=0))
    tl.store(out + 3, tl.sum(x2, axis=0))
    tl.store(out + 4, tl.sum(a * x2, axis=0))
    tl.store(out + 5, tl.sum(x2 * x2, axis=0))


def _int32(value: int) -> int:
    """The signed 32-bit integer with the bits of ``value`` (0 .. 2**32 - 1)."""
    return value - (1 << 32) if value >= 1 << 31 else value


def project_piece(x: torch.Tensor, low_start: int, key: int) -> torch.Tensor:
    """(p, p2, s1, s2, s3, s4), float64 on x's device, of a flat contiguous piece whose first element has the
    low 32 index bits ``low_start`` (the piece must not cross a multiple of 2**32) and whose
    indices' upper bits hash to ``key``."""
    if x.dtype == torch.bool:
        x = x.view(torch.uint8)
    elif x.dtype not in NATIVE:
        x = x.to(torch.float32)
    n = x.numel()
    tiles = triton.cdiv(n, BLOCK)
    partial = torch.empty(tiles, 6, dtype=torch.float64, device=x.device)
    # Passed as signed 32-bit values of the same bits: Triton types an int argument by its value
    # (int64 from 2**31 up), so half the keys would compile a kernel of their own in a timed block.
    # The kernel's arithmetic is modulo 2**32 either way.
    _project_kernel[(tiles,)](x, partial, n, _int32(low_start), _int32(key), M1=_M1, M2=_M2, BLOCK=BLOCK, num_warps=8)
    return partial.sum(0)
