"""Transposed convolution with few input channels as one implicit GEMM per output phase whose
reduction is every (channel, tap) pair that reaches the phase at once, for the tensor cores: 1-D,
2-D and 3-D, groups, stride, padding, output padding, dilation, with a fused epilogue.

The tap-outer kernel (``tap_gemm.py``) splits a transposed convolution's outputs by their position
modulo the stride (each phase a plain convolution over the taps that reach it) and reduces tap by
tap over a group's input channels: with 3 or 8 channels a step of the tensor cores' 16 is mostly
padding. Here a phase's reduction runs over ``(channel, tap)`` together, as ``folded.py`` does for
a plain convolution: 3 channels of a 3x3x3 filter at stride 2 reach a phase through 1-8 taps, at
most 24 indices, one step. A phase's taps are not a box of the filter, so the launcher builds a
**reduction table** once per geometry: for each phase and reduction index its channel, its column
of the weight (``channel * taps + tap``) and the input offset ``(delta_d, delta_h, delta_w)``; a
step loads ``BLOCK_K`` entries of it (a few hundred bytes, cached) and no lane divides.

A phase no tap reaches (a dilation that shares a factor with the stride) has an empty reduction
and stores the bias and the epilogue alone, as torch does. Float32 is multiplied in full precision
(``"ieee"``) or as three TF32 products of split operands (``"tf32x3"``, float32's accuracy:
``kernels/gemm/tiles.py``); 16-bit floats on the tensor cores; the accumulator is float32.

Whether it beats cuDNN is the GPU benchmark's to say (``kernels/conv/bench_conv.py``, patterns
``folded transposed``); the strategist offers it only where it measured a win (``kernels/wins.json``).
"""

import functools
import math

import torch
import triton
import triton.language as tl

from kernels.conv.implicit_gemm import conv_setup, conv_store_tile
from kernels.conv.launch import launch
from kernels.conv.tap_gemm import conv_tap_table, phase_tensors, phase_tile
from kernels.gemm.tiles import gemm_mma

#: Fields of one reduction-table entry: channel, weight column, input offset in d, h, w.
ENTRY_FIELDS = 5
_FIELDS = tl.constexpr(ENTRY_FIELDS)


@triton.jit
def conv_transposed_folded_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, q0, q1, q2, q3, table_ptr, phase_ptr,
    N, ID, IH, IW, C_OUT_G, OD, OH, OW, QD, QH, QW, K_ALL, K_MAX, PHASES,
    sd, sh, sw,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    sy_n, sy_c, sy_d, sy_h, sy_w,
    E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr, F32X3: tl.constexpr, C_IN_G: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One tile of rows ``q`` (``N x QD x QH x QW``) of phase ``program_id(1) % PHASES`` x output
    channels of group ``program_id(1) // PHASES``. Row ``q`` reads input ``q + delta`` and writes
    output ``q * (sd, sh, sw) + r``: ``phase_ptr`` holds each phase's ``(reduction length, r_d,
    r_h, r_w)``, ``table_ptr`` its entries field by field (``ENTRY_FIELDS`` rows of ``K_MAX``). The
    weight is ``(C_out, K_ALL)`` contiguous, ``K_ALL = C_IN_G * taps``."""
    g, phase, rn, col_ok, n, qd, qh, qw, count, od, oh, ow, row_ok = phase_tile(
        phase_ptr, PHASES, N, QD, QH, QW, C_OUT_G, OD, OH, OW, sd, sh, sw, BLOCK_M, BLOCK_N, GROUP_M)
    # A row's input at offset zero; lanes outside the input are masked and never read.
    x_row = x_ptr + n * sx_n + (g * C_IN_G).to(tl.int64) * sx_c + (qd * sx_d + qh * sx_h + qw * sx_w)
    w_col = w_ptr + (g * C_OUT_G + tl.where(col_ok, rn, 0)).to(tl.int64) * K_ALL
    entries = table_ptr + phase * (_FIELDS * K_MAX)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, count, BLOCK_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        k_ok = rk < count
        c = tl.load(entries + rk, mask=k_ok, other=0)
        col = tl.load(entries + K_MAX + rk, mask=k_ok, other=0)
        dd = tl.load(entries + 2 * K_MAX + rk, mask=k_ok, other=0)
        dh = tl.load(entries + 3 * K_MAX + rk, mask=k_ok, other=0)
        dw = tl.load(entries + 4 * K_MAX + rk, mask=k_ok, other=0)
        idd = qd[:, None] + dd[None, :]
        ih = qh[:, None] + dh[None, :]
        iw = qw[:, None] + dw[None, :]
        ok = row_ok[:, None] & k_ok[None, :] & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
        offset = c * sx_c + dd * sx_d + dh * sx_h + dw * sx_w
        a = tl.load(x_row[:, None] + offset[None, :], mask=ok, other=0.0)
        b = tl.load(w_col[None, :] + col[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = gemm_mma(a, b, acc, UPCAST, F32X3)

    conv_store_tile(
        acc, n, od, oh, ow, (g * C_OUT_G + rn).to(tl.int64), row_ok, col_ok, (tl.num_programs(1) // PHASES) * C_OUT_G, OD, OH, OW,
        y_ptr, sy_n, sy_c, sy_d, sy_h, sy_w, bias_ptr, HAS_BIAS, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS,
    )


def reduction_table(c_in_g: int, kernel: tuple, stride: tuple, padding: tuple, dilation: tuple) -> tuple[list, list, int]:
    """Each phase's reduction over ``(channel, tap)`` as plain Python lists: ``(phases, entries,
    k_max)``; ``phases[p] = (reduction length, r_d, r_h, r_w)``, ``entries[p]`` its ``(channel,
    channel * taps + tap, delta_d, delta_h, delta_w)``, channel by channel, at most ``k_max``."""
    phases, taps, _ = conv_tap_table(kernel, stride, padding, dilation, True)
    count = math.prod(kernel)
    entries = [[(c, c * count + tap, *delta) for c in range(c_in_g) for tap, *delta in phase] for phase in taps]
    return [(len(e), *p[1:]) for e, p in zip(entries, phases)], entries, max(1, max(len(e) for e in entries))


@functools.cache
def _table_tensors(c_in_g, kernel, stride, padding, dilation, device) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The reduction table (field by field, each phase's entries padded to ``k_max``) and the
    phases as int32 tensors on ``device``, with ``k_max`` and the number of phases: built once per
    geometry and device."""
    phases, entries, k_max = reduction_table(c_in_g, kernel, stride, padding, dilation)
    flat = []
    for entry in entries:
        padded = entry + [(0,) * ENTRY_FIELDS] * (k_max - len(entry))
        flat += [row[f] for f in range(ENTRY_FIELDS) for row in padded]
    return phase_tensors(phases, flat, k_max, device)


def conv_transposed_folded_configs(dtype: torch.dtype, c_out_g: int, k_max: int) -> list[triton.Config]:
    """Tile configurations autotuning measures on a GPU: the reduction step covers a phase in as
    few steps as it can (at least 16, the tensor cores' smallest), and the columns are no wider than
    the group's output channels need."""
    bk = min(32 if dtype == torch.float32 else 64, max(16, triton.next_power_of_2(k_max)))
    widest = max(16, triton.next_power_of_2(c_out_g))
    shapes = [(128, 64, 4), (64, 64, 4), (256, 64, 8), (128, 32, 4), (256, 32, 8), (128, 16, 4), (256, 16, 4)]
    chosen = {(m, min(nn, widest), w) for m, nn, w in shapes}
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": nn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=2) for m, nn, w in sorted(chosen)]


#: What re-tunes the kernel: the sizes, the input's layout and the compiled-in channel count.
TUNE_KEY = ["N", "ID", "IH", "IW", "C_OUT_G", "OD", "OH", "OW", "QD", "QH", "QW", "K_MAX", "PHASES", "sx_c", "sx_h", "C_IN_G", "F32X3"]


def conv_transposed_folded(
    x, weight, bias=None, stride=1, padding=0, dilation=1, output_padding=0, groups=1,
    post: tuple | None = None, precision: str = "tf32x3", config: triton.Config | None = None,
) -> torch.Tensor:
    """``post(convolution(x, weight, bias, stride, padding, dilation, True, output_padding,
    groups))``, ``aten.convolution``'s arguments in its order, the output contiguous; ``weight`` is
    ``(C_in, C_out / groups, k...)``; ``post``: ``(operands, program, scalars)``, the elementwise
    epilogue, its operands broadcastable to the output's shape. ``precision``: how float32
    operands are multiplied (``kernels.gemm.tiles.GEMM_PRECISIONS``)."""
    y, epilogue, (s, p, d), (x5, w5, y5), f32x3 = conv_setup(x, weight, bias, stride, padding, dilation, True, output_padding, groups, post, precision)
    kernel = tuple(w5.shape[2:])
    taps = math.prod(kernel)
    c_in_g, c_out_g = x.shape[1] // groups, w5.shape[1]
    # (C_in, C_out / groups, k...) -> (C_out, C_in / groups * taps), group by group: a column's
    # reduction is its channels' taps, channel by channel.
    w_flat = w5.reshape(groups, c_in_g, c_out_g, taps).permute(0, 2, 1, 3).reshape(groups * c_out_g, c_in_g * taps).contiguous()
    table, phase, k_max, phases = _table_tensors(c_in_g, kernel, s, p, d, x.device)
    rows = tuple(-(-o // st) for o, st in zip(y5.shape[2:], s))  # each phase's rows: ceil(O / stride)
    args = [
        x5, w_flat, y5, bias if bias is not None else y5, *(epilogue.pop(f"q{k}") for k in range(4)), table, phase,
        x.shape[0], *x5.shape[2:], c_out_g, *y5.shape[2:], *rows, c_in_g * taps, k_max, phases,
        *s, *x5.stride(), *y5.stride(),
    ]
    constants = dict(epilogue, HAS_BIAS=bias is not None, UPCAST=not x.is_cuda, F32X3=f32x3, C_IN_G=c_in_g)
    m = x.shape[0] * math.prod(rows)

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(c_out_g, meta["BLOCK_N"]), groups * phases)

    launch(conv_transposed_folded_kernel, grid, args, constants, TUNE_KEY, on_gpu=x.is_cuda, config=config,
           cpu_config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4}, num_warps=4, num_stages=1),
           gpu_configs=lambda: conv_transposed_folded_configs(x.dtype, c_out_g, k_max))
    return y.to(x.dtype)
