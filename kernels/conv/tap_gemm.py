"""Convolution as an implicit GEMM that walks the filter's taps outermost, for the tensor cores:
1-D, 2-D and 3-D, groups, stride, padding, dilation (not transposed), with a fused epilogue.

Rows are output positions ``(n, od, oh, ow)``, columns a group's output channels, and the reduction
runs tap by tap (``kd, kh, kw``) and, inside a tap, over input channels in steps of ``BLOCK_K``. One
step's input tile is then ``x[n, c0:c0 + BLOCK_K, id, ih, iw]`` for the tile's rows: one address
per row plus the channel times its stride. ``implicit_gemm.py`` decodes every reduction index into
``(channel, kd, kh, kw)`` and every (row, index) pair into an input position, integer work that
bounds it whatever its arithmetic (its full-float32 and three-way TF32 products ran at the same
speed, 2.5-4x slower than cuDNN). The weight is laid out ``(C_out, kd, kh, kw, C_in / groups)``
by the launcher (a copy of the filter), so each step's weight tile is contiguous along the
reduction, the K-major operand TF32 tensor-core products read. ``channels_last``: the input is
first made channel-innermost too (one pass over it) so that the input tile is K-major as well.

Float32 is multiplied in full precision (``"ieee"``) or as three TF32 products of split operands
(``"tf32x3"``, float32's accuracy: ``kernels/gemm/matmul.py``'s ``GEMM_PRECISIONS``); 16-bit
floats on the tensor cores; the accumulator is float32. The bias and an elementwise epilogue
(``kernels/elementwise``) run on the tile before its one store into a contiguous output.

Whether it beats cuDNN is the GPU benchmark's to say (``kernels/conv/bench_conv.py``, patterns
``taps``); the strategist offers it only where it measured a win (``kernels/wins.json``).
"""

import torch
import triton
import triton.language as tl

from kernels.conv.implicit_gemm import _conv_5d, _conv_tuple, conv_output_shape, conv_store_tile, conv_supported
from kernels.elementwise.kernel import ew_epilogue_args
from kernels.gemm.tiles import gemm_mma, gemm_tile_order

#: How float32 operands may be multiplied (``kernels.gemm.matmul.GEMM_PRECISIONS``).
TAP_CONV_PRECISIONS = ("ieee", "tf32x3")


@triton.jit
def conv_taps_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, q0, q1, q2, q3,
    N, C_IN_G, ID, IH, IW, C_OUT_G, OD, OH, OW, KH, KW, TAPS,
    sd, sh, sw, pd, ph, pw, dd, dh, dw,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    sy_n, sy_c, sy_d, sy_h, sy_w,
    E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr, F32X3: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One tile of output positions x output channels of group ``program_id(1)``. The weight is
    ``(C_out, TAPS, C_IN_G)`` contiguous."""
    pid = tl.program_id(0)
    g = tl.program_id(1)
    M = N * OD * OH * OW
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(C_OUT_G, BLOCK_N)
    pid_m, pid_n = gemm_tile_order(pid, grid_m, grid_n, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rm < M
    col_ok = rn < C_OUT_G
    rows = tl.where(row_ok, rm, 0)
    ow = rows % OW
    oh = (rows // OW) % OH
    od = (rows // (OW * OH)) % OD
    n = (rows // (OW * OH * OD)).to(tl.int64)
    x_row = x_ptr + n * sx_n + (g * C_IN_G).to(tl.int64) * sx_c
    w_col = w_ptr + (g * C_OUT_G + tl.where(col_ok, rn, 0)).to(tl.int64) * (TAPS * C_IN_G)
    id0 = od * sd - pd
    ih0 = oh * sh - ph
    iw0 = ow * sw - pw
    rk = tl.arange(0, BLOCK_K)
    c_pad = tl.cdiv(C_IN_G, BLOCK_K) * BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, TAPS * c_pad, BLOCK_K):
        # One step stays inside one tap (BLOCK_K divides the padded channel count).
        tap = k // c_pad
        c = k - tap * c_pad + rk
        kw = tap % KW
        kh = (tap // KW) % KH
        kd = tap // (KW * KH)
        idd = id0 + kd * dd
        ih = ih0 + kh * dh
        iw = iw0 + kw * dw
        ok = row_ok & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
        c_ok = c < C_IN_G
        # Lanes outside the input are masked; their (possibly negative) offsets are never read.
        a = tl.load(x_row[:, None] + (idd * sx_d + ih * sx_h + iw * sx_w)[:, None] + c[None, :] * sx_c, mask=ok[:, None] & c_ok[None, :], other=0.0)
        b = tl.load(w_col[None, :] + (tap * C_IN_G + c)[:, None], mask=c_ok[:, None] & col_ok[None, :], other=0.0)
        acc = gemm_mma(a, b, acc, UPCAST, F32X3)

    conv_store_tile(
        acc, n, od, oh, ow, (g * C_OUT_G + rn).to(tl.int64), row_ok, col_ok, tl.num_programs(1) * C_OUT_G, OD, OH, OW,
        y_ptr, sy_n, sy_c, sy_d, sy_h, sy_w, bias_ptr, HAS_BIAS, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS,
    )


def conv_taps_configs(dtype: torch.dtype, c_in_g: int, precision: str = "tf32x3") -> list[triton.Config]:
    """Tile configurations autotuning measures on a GPU. The channel step is at most the
    group's input channels (rounded up to 16, the smallest tensor-core step)."""
    wide = 32 if dtype == torch.float32 else 64
    bk = min(wide, max(16, triton.next_power_of_2(c_in_g)))
    if dtype == torch.float32 and precision == "ieee":
        shapes = [(128, 64, 4, 3), (64, 128, 4, 3), (64, 64, 4, 4), (128, 128, 8, 3)]
    else:
        shapes = [(128, 128, 8, 3), (128, 64, 4, 4), (64, 128, 4, 4), (128, 128, 4, 3), (64, 64, 4, 4), (256, 64, 8, 3), (128, 256, 8, 3)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": nn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s) for m, nn, w, s in shapes]


_TAP_TUNERS: dict[tuple, object] = {}


def _conv_taps_tuned(configs: list[triton.Config]):
    """One autotuner per configuration list (they share the compiled kernels of ``conv_taps_kernel``)."""
    key = tuple((tuple(sorted(c.kwargs.items())), c.num_warps, c.num_stages) for c in configs)
    if key not in _TAP_TUNERS:
        tune_key = ["N", "C_IN_G", "ID", "IH", "IW", "C_OUT_G", "OD", "OH", "OW", "KH", "KW", "TAPS", "sx_c", "F32X3"]
        _TAP_TUNERS[key] = triton.autotune(configs=configs, key=tune_key)(conv_taps_kernel)
    return _TAP_TUNERS[key]


def conv_taps(
    x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, post: tuple | None = None,
    precision: str = "tf32x3", channels_last: bool = False, config: triton.Config | None = None,
) -> torch.Tensor:
    """``post(convolution(x, weight, bias, stride, padding, dilation, groups))``, contiguous;
    ``post``: ``(operands, program, scalars)``, the elementwise epilogue, its operands
    broadcastable to the output's shape. ``precision``: how float32 operands are multiplied
    (``TAP_CONV_PRECISIONS``); ``channels_last``: make the input channel-innermost first."""
    if precision not in TAP_CONV_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r} (known: {', '.join(TAP_CONV_PRECISIONS)})")
    why_not = conv_supported(x, weight, bias, stride, padding, dilation, False, 0, groups)
    if why_not:
        raise ValueError(f"the convolution kernel does not cover this call: {why_not}")
    nd = x.dim() - 2
    shape = conv_output_shape(x, weight, stride, padding, dilation, False, 0, groups)
    # The Triton interpreter truncates float32 to bfloat16/float16 where the GPU rounds to
    # nearest: on the CPU the kernel stores float32 and torch rounds once, as the GPU does.
    y = torch.empty(shape, device=x.device, dtype=x.dtype if x.is_cuda else torch.float32)
    epilogue = ew_epilogue_args(post, tuple(shape), y)
    s, p, d = (_conv_tuple(v, nd) for v in (stride, padding, dilation))
    pad = (1,) * (3 - nd)
    s, d, p = pad + s, pad + d, (0,) * (3 - nd) + p
    x5, w5, y5 = _conv_5d(x), _conv_5d(weight), _conv_5d(y)
    if channels_last and x5.stride(1) != 1:
        x5 = x5.movedim(1, -1).contiguous().movedim(-1, 1)
    c_in_g, c_out_g = weight.shape[1], weight.shape[0] // groups
    taps = w5.shape[2] * w5.shape[3] * w5.shape[4]
    # (C_out, kd, kh, kw, C_in / groups): each tap's channels contiguous, the reduction K-major.
    w_taps = w5.permute(0, 2, 3, 4, 1).contiguous()
    f32x3 = precision == "tf32x3" and x.dtype == torch.float32
    args = [
        x5, w_taps, y5, bias if bias is not None else y5, *(epilogue.pop(f"q{k}") for k in range(4)),
        x.shape[0], c_in_g, *x5.shape[2:], c_out_g, *y5.shape[2:], w5.shape[3], w5.shape[4], taps,
        *s, *p, *d, *x5.stride(), *y5.stride(),
    ]
    constants = dict(epilogue, HAS_BIAS=bias is not None, UPCAST=not x.is_cuda, F32X3=f32x3)
    m = y5.shape[0] * y5.shape[2] * y5.shape[3] * y5.shape[4]

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(c_out_g, meta["BLOCK_N"]), groups)

    if config is None and not x.is_cuda:
        config = triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4}, num_warps=4, num_stages=1)
    if config is not None:
        conv_taps_kernel[grid(config.kwargs)](*args, **constants, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages)
    else:
        _conv_taps_tuned(conv_taps_configs(x.dtype, c_in_g, "tf32x3" if f32x3 else "ieee"))[grid](*args, **constants)
    return y.to(x.dtype)
