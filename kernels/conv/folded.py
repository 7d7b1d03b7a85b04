"""Convolution with few input channels as one implicit GEMM whose reduction is the whole filter
window at once, for the tensor cores: 1-D, 2-D and 3-D, groups, stride, padding, dilation, with
a fused epilogue.

A group with few input channels (an RGB image: 3; a stem's 8) gives the tap-outer kernel
(``tap_gemm.py``) a reduction step of one tap's channels, mostly padding at the tensor cores'
smallest step of 16 (8 input channels measured 0.65x cuDNN on an H100). Here the reduction runs
over ``(channel, kd, kh, kw)`` together: 3 channels of a 3x3 filter are 27 products a row, one
step of 32; 8 channels of a 3x3x3 filter are 216, seven steps of 32. The channel count and the
filter's shape are compile-time constants, so each step's decoding of its reduction indices into
an input offset is one vector of ``BLOCK_K`` integers, and the input tile's address is a row's
base plus that offset: no per-element division (what bounds ``implicit_gemm.py``). Without
padding every lane of a valid row reads inside the input and the tile needs only the rows' mask.

Float32 is multiplied in full precision (``"ieee"``) or as three TF32 products of split operands
(``"tf32x3"``, float32's accuracy: ``kernels/gemm/tiles.py``); 16-bit floats on the tensor cores;
the accumulator is float32. The bias and an elementwise epilogue (``kernels/elementwise``) run on
the tile before its one store into a contiguous output.

Whether it beats cuDNN is the GPU benchmark's to say (``kernels/conv/bench_conv.py``, patterns
``folded``); the strategist offers it only where it measured a win (``kernels/wins.json``).
"""

import math

import torch
import triton
import triton.language as tl

from kernels.conv.implicit_gemm import conv_setup, conv_store_tile
from kernels.conv.launch import launch
from kernels.gemm.tiles import gemm_mma, gemm_tile_order

#: The widest reduction (input channels of a group times the filter's taps) the kernel unrolls:
#: each step of it is compiled in, so a wider window is the tap-outer kernel's.
FOLDED_MAX_K = 512


@triton.jit
def conv_folded_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, q0, q1, q2, q3,
    N, ID, IH, IW, C_OUT_G, OD, OH, OW,
    sd, sh, sw, pd, ph, pw,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    sy_n, sy_c, sy_d, sy_h, sy_w,
    E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr, F32X3: tl.constexpr, PADDED: tl.constexpr,
    C_IN_G: tl.constexpr, KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, DD: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One tile of output positions (``N x OD x OH x OW``) x output channels of group
    ``program_id(1)``. The weight is ``(C_out, C_IN_G * KD * KH * KW)`` contiguous (a contiguous
    filter's own layout). ``PADDED``: some reads may fall outside the input (padding > 0)."""
    pid = tl.program_id(0)
    g = tl.program_id(1)
    M = N * OD * OH * OW
    pid_m, pid_n = gemm_tile_order(pid, tl.cdiv(M, BLOCK_M), tl.cdiv(C_OUT_G, BLOCK_N), GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rm < M
    col_ok = rn < C_OUT_G
    rows = tl.where(row_ok, rm, 0)
    ow = rows % OW
    oh = (rows // OW) % OH
    od = (rows // (OW * OH)) % OD
    n = (rows // (OW * OH * OD)).to(tl.int64)
    id0 = od * sd - pd
    ih0 = oh * sh - ph
    iw0 = ow * sw - pw
    # A row's first input element; lanes outside the input are masked and never read.
    x_row = x_ptr + n * sx_n + (g * C_IN_G).to(tl.int64) * sx_c + (id0 * sx_d + ih0 * sx_h + iw0 * sx_w)
    TAPS: tl.constexpr = KD * KH * KW
    K: tl.constexpr = C_IN_G * TAPS
    w_col = w_ptr + (g * C_OUT_G + tl.where(col_ok, rn, 0)).to(tl.int64) * K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in tl.static_range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        c = rk // TAPS
        t = rk % TAPS
        kw = (t % KW) * DW
        kh = ((t // KW) % KH) * DH
        kd = (t // (KW * KH)) * DD
        ok = row_ok[:, None] & k_ok[None, :]
        if PADDED:
            idd = id0[:, None] + kd[None, :]
            ih = ih0[:, None] + kh[None, :]
            iw = iw0[:, None] + kw[None, :]
            ok = ok & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
        offset = c * sx_c + kd * sx_d + kh * sx_h + kw * sx_w
        a = tl.load(x_row[:, None] + offset[None, :], mask=ok, other=0.0)
        b = tl.load(w_col[None, :] + rk[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = gemm_mma(a, b, acc, UPCAST, F32X3)

    conv_store_tile(
        acc, n, od, oh, ow, (g * C_OUT_G + rn).to(tl.int64), row_ok, col_ok, tl.num_programs(1) * C_OUT_G, OD, OH, OW,
        y_ptr, sy_n, sy_c, sy_d, sy_h, sy_w, bias_ptr, HAS_BIAS, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS,
    )


def conv_folded_configs(dtype: torch.dtype, c_out_g: int, k: int) -> list[triton.Config]:
    """Tile configurations autotuning measures on a GPU: the reduction step covers the window in
    as few steps as it can (at least 16, the tensor cores' smallest), and the columns are no wider
    than the group's output channels need."""
    bk = min(32 if dtype == torch.float32 else 64, max(16, triton.next_power_of_2(k)))
    widest = max(16, triton.next_power_of_2(c_out_g))
    shapes = [(128, 64, 4), (64, 64, 4), (256, 64, 8), (128, 128, 8), (128, 32, 4), (256, 32, 8), (128, 16, 4)]
    chosen = {(m, min(nn, widest), w) for m, nn, w in shapes}
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": nn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=2) for m, nn, w in sorted(chosen)]


#: What re-tunes the folded kernel: the sizes, the input's layout and the compiled-in geometry.
FOLDED_TUNE_KEY = ["N", "ID", "IH", "IW", "C_OUT_G", "OD", "OH", "OW", "sx_c", "sx_h", "C_IN_G", "KD", "KH", "KW", "F32X3", "PADDED"]


def conv_folded(
    x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
    post: tuple | None = None, precision: str = "tf32x3", config: triton.Config | None = None,
) -> torch.Tensor:
    """``post(convolution(x, weight, bias, stride, padding, dilation, groups))`` (a plain, not
    transposed, convolution), the output contiguous; ``post``: ``(operands, program, scalars)``,
    the elementwise epilogue, its operands broadcastable to the output's shape. ``precision``: how
    float32 operands are multiplied (``kernels.gemm.tiles.GEMM_PRECISIONS``). ``ValueError`` for a
    window wider than ``FOLDED_MAX_K`` or a call the kernel does not cover."""
    y, epilogue, (s, p, d), (x5, w5, y5), f32x3 = conv_setup(x, weight, bias, stride, padding, dilation, False, 0, groups, post, precision)
    k = math.prod(weight.shape[1:])  # the reduction: a group's input channels times the filter's taps
    if k > FOLDED_MAX_K:
        raise ValueError(f"the folded convolution unrolls at most {FOLDED_MAX_K} reduction indices (input channels x taps); this one has {k}")
    c_in_g, c_out_g = w5.shape[1], w5.shape[0] // groups
    w_flat = w5.reshape(w5.shape[0], k)
    if not w_flat.is_contiguous():
        w_flat = w_flat.contiguous()
    args = [
        x5, w_flat, y5, bias if bias is not None else y5, *(epilogue.pop(f"q{i}") for i in range(4)),
        x.shape[0], *x5.shape[2:], c_out_g, *y5.shape[2:], *s, *p, *x5.stride(), *y5.stride(),
    ]
    kd, kh, kw = w5.shape[2:]
    constants = dict(
        epilogue, HAS_BIAS=bias is not None, UPCAST=not x.is_cuda, F32X3=f32x3, PADDED=any(p),
        C_IN_G=c_in_g, KD=kd, KH=kh, KW=kw, DD=d[0], DH=d[1], DW=d[2],
    )
    m = y5.shape[0] * y5.shape[2] * y5.shape[3] * y5.shape[4]

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(c_out_g, meta["BLOCK_N"]), groups)

    launch(conv_folded_kernel, grid, args, constants, FOLDED_TUNE_KEY, on_gpu=x.is_cuda, config=config,
           cpu_config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4}, num_warps=4, num_stages=1),
           gpu_configs=lambda: conv_folded_configs(x.dtype, c_out_g, k))
    return y.to(x.dtype)
