"""Depthwise convolution (one input channel a group) as direct multiply-adds on the CUDA cores:
1-D, 2-D and 3-D, a channel multiplier, stride, padding, dilation, with a fused epilogue.

A depthwise convolution does ``2 * taps`` flops per output element and reads each input element
``taps`` times: it is memory-bound, its floor one read of the input and one write of the output.
cuDNN's float32 depthwise kernels run several times above that floor, inductor keeps the
convolution as cuDNN's call, and a GEMM formulation would leave a tensor-core tile's columns
(one output channel a group) padding. Here one program computes ``BLOCK`` consecutive output
positions of one ``(sample, output channel)`` plane: the taps are compile-time constants, each a
shifted, coalesced load of the input plane (repeats hit the cache) times one weight, accumulated
in float32 in the order of the taps. Without padding every lane of a valid position reads inside
the input, and the loads need only the positions' mask.

16-bit floats accumulate in float32 and round once. The bias and an elementwise epilogue
(``kernels/elementwise``) run on the block before its one store into a contiguous output.

Whether it beats cuDNN is the GPU benchmark's to say (``kernels/conv/bench_conv.py``, patterns
``depthwise``); the strategist offers it only where it measured a win (``kernels/wins.json``).
"""

import torch
import triton
import triton.language as tl

from kernels.conv.implicit_gemm import conv_setup
from kernels.conv.launch import launch
from kernels.elementwise.program import ew_epilogue, ew_stored
from kernels.conv.window import window_configs, window_positions, window_programs, window_tap

#: The most taps the kernel unrolls (each is compiled in).
DEPTHWISE_MAX_TAPS = 256


@triton.jit
def conv_depthwise_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, q0, q1, q2, q3,
    C_OUT, ID, IH, IW, OD, OH, OW,
    sd, sh, sw, pd, ph, pw,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    HAS_BIAS: tl.constexpr, PADDED: tl.constexpr, MULT: tl.constexpr,
    KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    BLOCK: tl.constexpr, BLOCK_W: tl.constexpr,
):
    """``BLOCK`` output positions of one plane (sample ``n``, output channel ``co``, reading input
    channel ``co // MULT``), consecutive or a tile of rows by ``BLOCK_W`` columns
    (``window_positions``): a plane's blocks are consecutive programs (one grid dimension, which
    has room for any count). The weight is ``(C_OUT, KD * KH * KW)`` contiguous, and so is the output."""
    plane, n, co, q, valid, id0, ih0, iw0 = window_positions(C_OUT, OD, OH, OW, sd, sh, sw, pd, ph, pw, BLOCK, BLOCK_W)
    x_pos = x_ptr + n * sx_n + (co // MULT).to(tl.int64) * sx_c + (id0 * sx_d + ih0 * sx_h + iw0 * sx_w)
    acc = tl.zeros(q.shape, dtype=tl.float32)
    for t in tl.static_range(KD * KH * KW):
        offset, ok = window_tap(t, id0, ih0, iw0, valid, ID, IH, IW, sx_d, sx_h, sx_w, KH, KW, DD, DH, DW, PADDED)
        # Lanes outside the input are masked; their (possibly negative) offsets are never read.
        v = tl.load(x_pos + offset, mask=ok, other=0.0)
        acc += v.to(tl.float32) * tl.load(w_ptr + co * (KD * KH * KW) + t).to(tl.float32)
    if HAS_BIAS:
        acc += tl.load(bias_ptr + co).to(tl.float32)
    idx = plane.to(tl.int64) * (OD * OH * OW) + q
    acc = ew_epilogue(acc, idx, valid, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    tl.store(y_ptr + idx, ew_stored(acc, y_ptr.dtype.element_ty), mask=valid)


def depthwise_supported(x, weight, groups, transposed=False) -> str:
    """Why this is not a depthwise convolution the kernel does ("" when it is)."""
    if transposed:
        return "a transposed convolution"
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor) or x.dim() not in (3, 4, 5):
        return "a batched 1-, 2- or 3-D input"
    if groups != x.shape[1] or weight.shape[1] != 1 or weight.shape[0] % groups:
        return f"one input channel a group (got {x.shape[1]} channels in {groups} groups, weight {tuple(weight.shape)})"
    taps = weight[0].numel()
    if taps > DEPTHWISE_MAX_TAPS:
        return f"at most {DEPTHWISE_MAX_TAPS} taps (got {taps})"
    return ""


def depthwise_configs(ow: int) -> list[triton.Config]:
    """Blocks autotuning measures on a GPU: consecutive positions, and tiles of output rows by
    columns no wider than the rows need (``ow`` output columns)."""
    flat = [(256, 0, 4), (512, 0, 4), (1024, 0, 4), (1024, 0, 8), (2048, 0, 8)]
    return window_configs(flat + [(1024, 64, 4), (1024, 128, 4), (2048, 256, 8)], ow)


#: What re-tunes the depthwise kernel: the sizes, the input's layout and the compiled-in window.
DEPTHWISE_TUNE_KEY = ["C_OUT", "ID", "IH", "IW", "OD", "OH", "OW", "sx_c", "sx_h", "sx_w", "KD", "KH", "KW", "MULT", "PADDED"]


def conv_depthwise(
    x, weight, bias=None, stride=1, padding=0, dilation=1, groups=None, post: tuple | None = None, config: triton.Config | None = None,
) -> torch.Tensor:
    """``post(convolution(x, weight, bias, stride, padding, dilation, groups))`` for a depthwise
    convolution (``groups`` = the input's channels, default; each output channel reads one input
    channel), the output contiguous; ``post``: ``(operands, program, scalars)``, the elementwise
    epilogue, its operands broadcastable to the output's shape. ``ValueError`` for a convolution
    the kernel does not cover."""
    groups = x.shape[1] if groups is None and isinstance(x, torch.Tensor) else groups
    why_not = depthwise_supported(x, weight, groups)
    if why_not:
        raise ValueError(f"the depthwise kernel does not cover this call: {why_not}")
    y, epilogue, (s, p, d), (x5, w5, y5), _ = conv_setup(x, weight, bias, stride, padding, dilation, False, 0, groups, post, "ieee")
    c_out = w5.shape[0]
    w_flat = w5.reshape(c_out, -1).contiguous()
    args = [
        x5, w_flat, y5, bias if bias is not None else y5, *(epilogue.pop(f"q{i}") for i in range(4)),
        c_out, *x5.shape[2:], *y5.shape[2:], *s, *p, *x5.stride(),
    ]
    kd, kh, kw = w5.shape[2:]
    constants = dict(epilogue, HAS_BIAS=bias is not None, PADDED=any(p), MULT=c_out // groups, KD=kd, KH=kh, KW=kw, DD=d[0], DH=d[1], DW=d[2])

    def grid(meta):
        return (window_programs(x.shape[0] * c_out, tuple(y5.shape[2:]), meta),)

    launch(conv_depthwise_kernel, grid, args, constants, DEPTHWISE_TUNE_KEY, on_gpu=x.is_cuda, config=config,
           cpu_config=triton.Config({"BLOCK": 64, "BLOCK_W": 0}, num_warps=4), gpu_configs=lambda: depthwise_configs(y5.shape[4]))
    return y.to(x.dtype)
