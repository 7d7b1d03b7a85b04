"""Max and average pooling over 1-3 spatial dimensions: kernel size, stride, padding, dilation
(max), ``ceil_mode``, ``count_include_pad`` and ``divisor_override`` (average), with a fused
epilogue.

Pooling is memory-bound: its floor is one read of the input and one write of the output. One
program computes ``BLOCK`` consecutive output positions of one ``(sample, channel)`` plane; the
window's taps are compile-time constants, each a shifted, coalesced load of the input plane
(overlapping windows hit the cache). Max propagates NaN as PyTorch does and pads with -inf;
average divides as PyTorch does (by the window clipped to the padded input, or to the input
where padding is not counted, or by the override). Values accumulate in float32 and round once.
Only the pooled values are computed: a max pool whose indices are read is not this kernel's.

Whether it beats PyTorch and inductor is the GPU benchmark's to say
(``kernels/pool/bench_pool.py``); the strategist offers it only where it measured a win
(``kernels/wins.json``).
"""

import math

import torch
import triton
import triton.language as tl

from kernels.elementwise.kernel import ew_epilogue_args
from kernels.elementwise.program import ew_epilogue, ew_stored
from kernels.conv.launch import launch
from kernels.conv.window import window_configs, window_positions, window_programs, window_sizes, window_tap

POOL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: The most taps a window may have (each is compiled in).
POOL_MAX_TAPS = 512
POOL_KINDS = ("max", "avg")


@triton.jit
def pool_kernel(
    x_ptr, y_ptr, q0, q1, q2, q3,
    C, ID, IH, IW, OD, OH, OW,
    sd, sh, sw, pd, ph, pw,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    divisor,
    E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    IS_MAX: tl.constexpr, PADDED: tl.constexpr, COUNT_PAD: tl.constexpr, OVERRIDE: tl.constexpr,
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    BLOCK: tl.constexpr, BLOCK_W: tl.constexpr,
):
    """``BLOCK`` output positions of one plane (sample ``n``, channel ``c``), consecutive or a tile
    of rows by ``BLOCK_W`` columns (``window_positions``); a plane's blocks are consecutive programs. The output is contiguous ``(N, C, OD, OH, OW)``. ``PADDED``: a window may
    reach outside the input (padding, or ``ceil_mode``'s last windows)."""
    plane, n, c, q, valid, id0, ih0, iw0 = window_positions(C, OD, OH, OW, sd, sh, sw, pd, ph, pw, BLOCK, BLOCK_W)
    x_pos = x_ptr + n * sx_n + c.to(tl.int64) * sx_c + (id0 * sx_d + ih0 * sx_h + iw0 * sx_w)
    if IS_MAX:
        acc = tl.full(q.shape, float("-inf"), tl.float32)
    else:
        acc = tl.zeros(q.shape, dtype=tl.float32)
    for t in tl.static_range(KD * KH * KW):
        offset, ok = window_tap(t, id0, ih0, iw0, valid, ID, IH, IW, sx_d, sx_h, sx_w, KH, KW, DD, DH, DW, PADDED)
        # Lanes outside the input are masked; their (possibly negative) offsets are never read.
        v = tl.load(x_pos + offset, mask=ok, other=float("-inf") if IS_MAX else 0.0).to(tl.float32)
        if IS_MAX:
            acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
        else:
            acc += v
    if not IS_MAX:
        if OVERRIDE:
            acc = acc / divisor
        elif PADDED:
            # PyTorch's divisor: the window clipped to the padded input, or to the input itself.
            lo_d = id0
            hi_d = tl.minimum(id0 + KD, ID + pd)
            lo_h = ih0
            hi_h = tl.minimum(ih0 + KH, IH + ph)
            lo_w = iw0
            hi_w = tl.minimum(iw0 + KW, IW + pw)
            if not COUNT_PAD:
                lo_d = tl.maximum(lo_d, 0)
                lo_h = tl.maximum(lo_h, 0)
                lo_w = tl.maximum(lo_w, 0)
                hi_d = tl.minimum(hi_d, ID)
                hi_h = tl.minimum(hi_h, IH)
                hi_w = tl.minimum(hi_w, IW)
            acc = acc / ((hi_d - lo_d) * (hi_h - lo_h) * (hi_w - lo_w)).to(tl.float32)
        else:
            acc = acc / (KD * KH * KW)
    idx = plane.to(tl.int64) * (OD * OH * OW) + q
    acc = ew_epilogue(acc, idx, valid, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    tl.store(y_ptr + idx, ew_stored(acc, y_ptr.dtype.element_ty), mask=valid)


def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooled length: with ``ceil_mode`` the last window may start past the input's end
    but not past the left padding's reach into it."""
    span = size + 2 * p - d * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _pooled_dims(x, kernel_size) -> int:
    """How many trailing dimensions are pooled: the kernel size's length, or for one int every
    dimension after batch and channels."""
    return len(kernel_size) if not isinstance(kernel_size, int) else x.dim() - 2


def pool_supported(x, kind: str, kernel_size, stride, padding, dilation) -> str:
    """Why the kernel does not cover this pooling ("" when it does)."""
    if kind not in POOL_KINDS:
        return f"a pooling kind of {', '.join(POOL_KINDS)} (got {kind!r})"
    if not isinstance(x, torch.Tensor) or x.dtype not in POOL_DTYPES:
        return f"a tensor of one of {', '.join(str(d) for d in POOL_DTYPES)}"
    nd = _pooled_dims(x, kernel_size)
    if not 1 <= nd <= 3 or x.dim() < nd + 1:
        return f"1-3 pooled dimensions after at least one channel dimension (got {nd} of a {x.dim()}-D input)"
    k, s, p, d = (window_sizes(v, nd) for v in (kernel_size, stride or kernel_size, padding, dilation))
    if any(len(v) != nd for v in (k, s, p, d)):
        return "as many sizes, strides, paddings and dilations as pooled dimensions"
    if any(v <= 0 for v in k + s + d) or any(v < 0 or 2 * v > kk for v, kk in zip(p, k)):
        return "positive kernel sizes, strides and dilations, and padding at most half the kernel size"
    if math.prod(k) > POOL_MAX_TAPS:
        return f"at most {POOL_MAX_TAPS} taps a window (got {math.prod(k)})"
    return ""


def pool(
    x, kind: str, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, count_include_pad=True, divisor_override=None,
    post: tuple | None = None, config: triton.Config | None = None,
) -> torch.Tensor:
    """``post(max_poolNd(x, ...))`` or ``post(avg_poolNd(x, ...))`` (``kind`` "max" or "avg"), pooling
    the last ``len(kernel_size)`` dimensions, every dimension before them a plane of its own; the
    output contiguous. ``stride`` defaults to the kernel size, as in PyTorch (``dilation`` is the
    max pool's only). ``ValueError`` for a call the kernel does not cover."""
    why_not = pool_supported(x, kind, kernel_size, stride, padding, dilation)
    if why_not:
        raise ValueError(f"the pooling kernel does not cover this call: {why_not}")
    nd = _pooled_dims(x, kernel_size)
    k, s, p, d = (window_sizes(v, nd) for v in (kernel_size, stride or kernel_size, padding, 1 if kind == "avg" else dilation))
    spatial_in = tuple(x.shape[x.dim() - nd:])
    out_spatial = tuple(pool_output_size(*args, ceil_mode) for args in zip(spatial_in, k, s, p, d))
    if any(o <= 0 for o in out_spatial):
        raise ValueError(f"the pooling kernel does not cover this call: an empty output {out_spatial}")
    lead = tuple(x.shape[: x.dim() - nd])
    # (A, B, D, H, W) with the input's own strides where the leading dimensions are one or two.
    x5 = x.unsqueeze(0) if len(lead) == 1 else x if len(lead) == 2 else x.reshape(-1, lead[-1], *spatial_in)
    while x5.dim() < 5:
        x5 = x5.unsqueeze(2)
    shape = (*lead, *out_spatial)
    # The Triton interpreter truncates float32 to 16-bit floats where the GPU rounds to nearest:
    # on the CPU the kernel stores float32 and torch rounds once, as the GPU does.
    y = torch.empty(shape, device=x.device, dtype=x.dtype if x.is_cuda else torch.float32)
    epilogue = ew_epilogue_args(post, shape, y)
    one = (1,) * (3 - nd)
    reaches_out = any(p) or any((o - 1) * st - pp + dd * (kk - 1) >= size for o, st, pp, dd, kk, size in zip(out_spatial, s, p, d, k, spatial_in))
    args = [
        x5, y, *(epilogue.pop(f"q{i}") for i in range(4)), x5.shape[1], *x5.shape[2:], *(one + out_spatial),
        *(one + s), *((0,) * (3 - nd) + p), *x5.stride(), float(divisor_override or 1),
    ]
    k3, d3 = one + k, one + d
    constants = dict(
        epilogue, IS_MAX=kind == "max", PADDED=reaches_out, COUNT_PAD=bool(count_include_pad), OVERRIDE=divisor_override is not None,
        KD=k3[0], KH=k3[1], KW=k3[2], DD=d3[0], DH=d3[1], DW=d3[2],
    )
    out3 = one + out_spatial

    def grid(meta):
        return (window_programs(x5.shape[0] * x5.shape[1], out3, meta),)

    launch(pool_kernel, grid, args, constants, POOL_TUNE_KEY, on_gpu=x.is_cuda, config=config,
           cpu_config=triton.Config({"BLOCK": 64, "BLOCK_W": 0}, num_warps=4), gpu_configs=lambda: pool_configs(out3[2]))
    return y.to(x.dtype)


def pool_configs(ow: int) -> list[triton.Config]:
    """Blocks autotuning measures on a GPU: consecutive positions, and tiles of output rows by
    columns no wider than the rows need (``ow`` output columns)."""
    flat = [(256, 0, 4), (512, 0, 4), (1024, 0, 4), (1024, 0, 8)]
    return window_configs(flat + [(1024, 64, 4), (1024, 128, 4), (2048, 256, 8)], ow)


#: What re-tunes the pooling kernel: the sizes, the input's layout and the compiled-in window.
POOL_TUNE_KEY = ["C", "ID", "IH", "IW", "OD", "OH", "OW", "sx_c", "sx_h", "sx_w", "IS_MAX", "KD", "KH", "KW", "PADDED"]
