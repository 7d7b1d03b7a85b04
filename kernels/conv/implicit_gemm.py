"""Convolution as an implicit GEMM in Triton, with a fused epilogue: 1-D, 2-D and 3-D, groups,
stride, padding, dilation, and transposed convolution (its gather form), on NC[D]HW tensors of
any strides.

The output's positions ``(n, od, oh, ow)`` are the GEMM's rows, the output channels of one group
its columns, and ``(input channel, kd, kh, kw)`` its reduction: each tile gathers its input patch
on the fly (no im2col buffer) and multiplies it by the weight's slice. A transposed convolution
reads input position ``(o + padding - k * dilation) / stride`` where that is a whole number inside
the input. Float32 multiplies in full precision (``input_precision="ieee"``, never TF32);
bfloat16/float16 on the tensor cores; the accumulator is float32. The bias and then an
elementwise epilogue (``kernels/elementwise``: ``post = (operands, program, scalars)``, operands
broadcast to the output) run on the tile before its one store: per-channel scales, activations,
residuals.

Whether it beats cuDNN depends on the shape class, and the strategist offers it only where
``benchmarks/gpu/gemm_conv.py`` measured a win (``kernels/wins.json``).
"""

import math

import torch
import triton
import triton.language as tl

from kernels.conv.launch import launch
from kernels.conv.window import window_sizes
from kernels.elementwise.kernel import ew_epilogue_args
from kernels.elementwise.program import ew_epilogue, ew_stored
from kernels.gemm.tiles import gemm_f32x3, gemm_mma

CONV_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
INT32_LIMIT = 2**31


@triton.jit
def conv_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, q0, q1, q2, q3,
    N, C_IN_G, ID, IH, IW, C_OUT_G, OD, OH, OW, KD, KH, KW,
    sd, sh, sw, pd, ph, pw, dd, dh, dw,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    sw_o, sw_i, sw_d, sw_h, sw_w,
    sy_n, sy_c, sy_d, sy_h, sy_w,
    E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    TRANSPOSED: tl.constexpr, HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr, F32X3: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """One tile of output positions x output channels of group ``program_id(2)``. ``sw_o`` is
    the weight's stride over the group's output channels and ``sw_i`` over its input channels
    (for a transposed convolution the weight is ``(C_in, C_out / groups, k...)``)."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    g = tl.program_id(2)
    M = N * OD * OH * OW
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rm < M
    col_ok = rn < C_OUT_G
    ow = rm % OW
    oh = (rm // OW) % OH
    od = (rm // (OW * OH)) % OD
    n = (rm // (OW * OH * OD)).to(tl.int64)
    x_base = x_ptr + n * sx_n + (g * C_IN_G).to(tl.int64) * sx_c
    if TRANSPOSED:
        w_base = w_ptr + (g * C_IN_G).to(tl.int64) * sw_i + rn.to(tl.int64) * sw_o
    else:
        w_base = w_ptr + (g * C_OUT_G + rn).to(tl.int64) * sw_o
    KK = KD * KH * KW
    K = C_IN_G * KK
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < K
        ci = rk // KK
        kk = rk % KK
        kw = kk % KW
        kh = (kk // KW) % KH
        kd = kk // (KW * KH)
        if TRANSPOSED:
            td = od[:, None] + pd - kd[None, :] * dd
            th = oh[:, None] + ph - kh[None, :] * dh
            tw = ow[:, None] + pw - kw[None, :] * dw
            ok = (td >= 0) & (th >= 0) & (tw >= 0)
            # Negative lanes are masked out; clamped, no division ever sees a negative value, so
            # no lane depends on which way signed division rounds (kernels/int_division.py).
            td = tl.maximum(td, 0)
            th = tl.maximum(th, 0)
            tw = tl.maximum(tw, 0)
            idd = td // sd
            ih = th // sh
            iw = tw // sw
            ok = ok & (td % sd == 0) & (th % sh == 0) & (tw % sw == 0)
        else:
            idd = od[:, None] * sd - pd + kd[None, :] * dd
            ih = oh[:, None] * sh - ph + kh[None, :] * dh
            iw = ow[:, None] * sw - pw + kw[None, :] * dw
            ok = (idd >= 0) & (ih >= 0) & (iw >= 0)
        ok = ok & (idd < ID) & (ih < IH) & (iw < IW) & row_ok[:, None] & k_ok[None, :]
        a = tl.load(x_base[:, None] + ci[None, :] * sx_c + idd * sx_d + ih * sx_h + iw * sx_w, mask=ok, other=0.0)
        w_off = ci * sw_i + kd * sw_d + kh * sw_h + kw * sw_w
        b = tl.load(w_base[None, :] + w_off[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = gemm_mma(a, b, acc, UPCAST, F32X3)

    conv_store_tile(
        acc, n, od, oh, ow, (g * C_OUT_G + rn).to(tl.int64), row_ok, col_ok, tl.num_programs(2) * C_OUT_G, OD, OH, OW,
        y_ptr, sy_n, sy_c, sy_d, sy_h, sy_w, bias_ptr, HAS_BIAS, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS,
    )


@triton.jit
def conv_store_tile(
    acc, n, od, oh, ow, ch, row_ok, col_ok, C_OUT, OD, OH, OW,
    y_ptr, sy_n, sy_c, sy_d, sy_h, sy_w, bias_ptr, HAS_BIAS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
):
    """A convolution's output tile (rows: positions ``n, od, oh, ow``; columns: channels ``ch`` of
    ``C_OUT``): the bias, then the elementwise epilogue (its operands indexed over the contiguous
    output ``(N, C, OD, OH, OW)``), then the one store."""
    mask = row_ok[:, None] & col_ok[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + ch, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    spatial = (od * OH + oh).to(tl.int64) * OW + ow
    idx = (n[:, None] * C_OUT + ch[None, :]) * (OD * OH * OW) + spatial[:, None]
    acc = ew_epilogue(acc, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    y = y_ptr + (n * sy_n + od * sy_d + oh * sy_h + ow * sy_w)[:, None] + (ch * sy_c)[None, :]
    tl.store(y, ew_stored(acc, y_ptr.dtype.element_ty), mask=mask)


def _conv_5d(t: torch.Tensor) -> torch.Tensor:
    """An N C [D] [H] W tensor as 5-D (size-1 dimensions inserted as views)."""
    while t.dim() < 5:
        t = t.unsqueeze(2)
    return t


def conv_supported(x, weight, bias=None, stride=1, padding=0, dilation=1, transposed=False, output_padding=0, groups=1) -> str:
    """Why the kernel does not cover this convolution ("" when it does)."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        return "input and weight must be tensors"
    if x.dim() not in (3, 4, 5) or weight.dim() != x.dim():
        return f"a 1-, 2- or 3-D convolution of a batched input (got input {tuple(x.shape)}, weight {tuple(weight.shape)})"
    if x.dtype not in CONV_DTYPES or weight.dtype != x.dtype:
        return f"input and weight of one of {', '.join(str(d) for d in CONV_DTYPES)} (got {x.dtype}, {weight.dtype})"
    if isinstance(padding, str):
        return "string padding ('same', 'valid')"
    if bias is not None and (bias.dim() != 1 or bias.device != x.device):
        return "a bias that is not a vector on the input's device"
    if x.device != weight.device:
        return "input and weight on different devices"
    shape = conv_output_shape(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    if any(s <= 0 for s in shape):
        return f"an empty output {tuple(shape)}"
    # The kernel indexes output rows, and offsets inside one sample or the weight, in 32 bits.
    rows = shape[0] * math.prod(shape[2:])
    spans = {"output rows": rows, "input sample": _span(x, 1), "weight": _span(weight, 0), "output sample": math.prod(shape[1:])}
    too_big = [f"{what} ({n})" for what, n in spans.items() if n >= INT32_LIMIT]
    if too_big:
        return f"index ranges of 2**31 or more: {', '.join(too_big)}"
    return ""


def _span(t: torch.Tensor, first: int) -> int:
    """One past the largest element offset of ``t`` over its dimensions from ``first`` on."""
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape[first:], t.stride()[first:]))


def conv_output_shape(x, weight, stride, padding, dilation, transposed, output_padding, groups) -> tuple[int, ...]:
    nd = x.dim() - 2
    s, p, d, op = (window_sizes(v, nd) for v in (stride, padding, dilation, output_padding))
    k = weight.shape[2:]
    if transposed:
        spatial = [(x.shape[2 + i] - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 for i in range(nd)]
        channels = weight.shape[1] * groups
    else:
        spatial = [(x.shape[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
        channels = weight.shape[0]
    return (x.shape[0], channels, *spatial)


def conv_configs(dtype: torch.dtype) -> list[triton.Config]:
    """Tile configurations autotuning measures on a GPU."""
    bk = 32 if dtype == torch.float32 else 64
    shapes = [(128, 64, bk, 4, 3), (64, 128, bk, 4, 3), (128, 128, bk, 8, 3), (64, 64, bk, 4, 4), (256, 64, bk, 8, 3), (128, 32, bk, 4, 3), (64, 32, bk, 4, 4)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s) for m, n, k, w, s in shapes]


#: What re-tunes the implicit-GEMM kernel: the sizes, the filter's shape and the precision.
CONV_TUNE_KEY = ["N", "C_IN_G", "ID", "IH", "IW", "C_OUT_G", "OD", "OH", "OW", "KD", "KH", "KW", "F32X3"]


def conv_setup(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups, post, precision) -> tuple:
    """What a convolution kernel's launcher does first: check the call (``ValueError`` naming what
    is not covered), allocate the contiguous output, lay out the epilogue's operands, and give the
    stride, padding and dilation as 3-D tuples with the input, weight and output as 5-D views,
    and the kernels' ``F32X3`` for ``precision``: ``(y, epilogue, (s, p, d), (x5, w5, y5), f32x3)``."""
    f32x3 = gemm_f32x3(precision, x.dtype if isinstance(x, torch.Tensor) else None)
    why_not = conv_supported(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    if why_not:
        raise ValueError(f"the convolution kernel does not cover this call: {why_not}")
    nd = x.dim() - 2
    shape = conv_output_shape(x, weight, stride, padding, dilation, transposed, output_padding, groups)
    # The Triton interpreter truncates float32 to bfloat16/float16 where the GPU rounds to
    # nearest: on the CPU the kernel stores float32 and torch rounds once, as the GPU does.
    y = torch.empty(shape, device=x.device, dtype=x.dtype if x.is_cuda else torch.float32)
    epilogue = ew_epilogue_args(post, tuple(shape), y)
    s, p, d = (window_sizes(v, nd) for v in (stride, padding, dilation))
    lead = 3 - nd
    geometry = ((1,) * lead + s, (0,) * lead + p, (1,) * lead + d)
    return y, epilogue, geometry, (_conv_5d(x), _conv_5d(weight), _conv_5d(y)), f32x3


def conv_forward(
    x, weight, bias=None, stride=1, padding=0, dilation=1, transposed=False, output_padding=0, groups=1,
    post: tuple | None = None, config: triton.Config | None = None, precision: str = "ieee",
) -> torch.Tensor:
    """``post(convolution(x, weight, bias, ...))`` with ``aten.convolution``'s arguments;
    ``post``: ``(operands, program, scalars)``, the elementwise epilogue, its operands
    broadcastable to the output's shape. The output is contiguous. ``precision``: how float32
    operands are multiplied, ``"ieee"`` or ``"tf32x3"`` (``kernels.gemm.tiles.GEMM_PRECISIONS``)."""
    y, epilogue, (s, p, d), (x5, w5, y5), f32x3 = conv_setup(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups, post, precision)
    if transposed:
        c_in_g, c_out_g = x.shape[1] // groups, weight.shape[1]
        sw_o, sw_i = w5.stride(1), w5.stride(0)
    else:
        c_in_g, c_out_g = weight.shape[1], weight.shape[0] // groups
        sw_o, sw_i = w5.stride(0), w5.stride(1)
    args = [
        x5, w5, y5, bias if bias is not None else y5, *(epilogue.pop(f"q{k}") for k in range(4)),
        x.shape[0], c_in_g, *x5.shape[2:], c_out_g, *y5.shape[2:], *w5.shape[2:],
        *s, *p, *d, *x5.stride(), sw_o, sw_i, *w5.stride()[2:], *y5.stride(),
    ]
    constants = dict(epilogue, TRANSPOSED=bool(transposed), HAS_BIAS=bias is not None, UPCAST=not x.is_cuda, F32X3=f32x3)
    m = y5.shape[0] * y5.shape[2] * y5.shape[3] * y5.shape[4]

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(c_out_g, meta["BLOCK_N"]), groups)

    launch(conv_kernel, grid, args, constants, CONV_TUNE_KEY, on_gpu=x.is_cuda, config=config,
           cpu_config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16}, num_warps=4, num_stages=1),
           gpu_configs=lambda: conv_configs(x.dtype))
    return y.to(x.dtype)
