"""Convolution as an implicit GEMM that walks the filter's taps outermost, for the tensor cores:
1-D, 2-D and 3-D, groups, stride, padding, dilation, plain or transposed, with a fused epilogue.

Rows are output positions, columns a group's output channels, and the reduction runs tap by tap
and, inside a tap, over input channels in steps of ``BLOCK_K``. One step's input tile is then
``x[n, c0:c0 + BLOCK_K, i_d, i_h, i_w]`` for the tile's rows: one address per row plus the channel
times its stride. ``implicit_gemm.py`` decodes every reduction index into ``(channel, kd, kh, kw)``
and every (row, index) pair into an input position, integer work that bounds it whatever its
arithmetic (its full-float32 and three-way TF32 products ran at the same speed, 2.5-4x slower
than cuDNN). The weight is laid out ``(C_out, taps, C_in / groups)`` by the launcher (a copy of
the filter), so each step's weight tile is contiguous along the reduction, the K-major operand
TF32 tensor-core products read. ``channels_last``: the input is first made channel-innermost too
(one pass over it) so that the input tile is K-major as well.

Both kinds of convolution are one loop over a **tap table** the launcher builds once per geometry:
for each output *phase* a list of ``(tap, delta_d, delta_h, delta_w)``, and a row ``q`` of the phase
reads input position ``q * step_in + delta`` and writes output position ``q * step_out + phase``.
A plain convolution has one phase, every tap, ``step_in = stride``, ``delta = k * dilation -
padding``. A transposed one (the gradient of a strided convolution, in gather form) splits its
outputs by their position modulo the stride: output ``o = q * stride + r`` takes tap ``k`` only
where ``r + padding - k * dilation`` is a multiple of the stride, from input ``q + (r + padding - k
* dilation) / stride``, so each phase is a plain convolution over the taps that reach it and no
product is spent on the zeros a strided transposed convolution would otherwise gather.

Float32 is multiplied in full precision (``"ieee"``) or as three TF32 products of split operands
(``"tf32x3"``, float32's accuracy: ``kernels/gemm/tiles.py``'s ``GEMM_PRECISIONS``); 16-bit
floats on the tensor cores; the accumulator is float32. The bias and an elementwise epilogue
(``kernels/elementwise``) run on the tile before its one store into a contiguous output.

Whether it beats cuDNN is the GPU benchmark's to say (``kernels/conv/bench_conv.py``, patterns
``taps``); the strategist offers it only where it measured a win (``kernels/wins.json``).
"""

import functools
import math

import torch
import triton
import triton.language as tl

from kernels.conv.implicit_gemm import conv_setup, conv_store_tile
from kernels.conv.launch import launch
from kernels.gemm.tiles import gemm_mma, gemm_tile_order


@triton.jit
def phase_tile(phase_ptr, PHASES, N, QD, QH, QW, C_OUT_G, OD, OH, OW, bd, bh, bw,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
    """Where a program of a phase-split convolution works: group ``g`` and ``phase`` (from
    ``program_id(1)``), its tile's columns ``rn`` (``col_ok`` inside ``C_OUT_G``) and rows ``q =
    (n, qd, qh, qw)`` of ``N x QD x QH x QW``, the phase's entry count (``phase_ptr``'s ``(count,
    r_d, r_h, r_w)``), each row's output position ``q * (bd, bh, bw) + r`` and whether it is inside
    the output (``row_ok``)."""
    g = tl.program_id(1) // PHASES
    phase = tl.program_id(1) % PHASES
    M = N * QD * QH * QW
    pid_m, pid_n = gemm_tile_order(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(C_OUT_G, BLOCK_N), GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.where(rm < M, rm, 0)
    qw = rows % QW
    qh = (rows // QW) % QH
    qd = (rows // (QW * QH)) % QD
    n = (rows // (QW * QH * QD)).to(tl.int64)
    count = tl.load(phase_ptr + phase * 4)
    od = qd * bd + tl.load(phase_ptr + phase * 4 + 1)
    oh = qh * bh + tl.load(phase_ptr + phase * 4 + 2)
    ow = qw * bw + tl.load(phase_ptr + phase * 4 + 3)
    row_ok = (rm < M) & (od < OD) & (oh < OH) & (ow < OW)
    return g, phase, rn, rn < C_OUT_G, n, qd, qh, qw, count, od, oh, ow, row_ok


@triton.jit
def conv_taps_kernel(
    x_ptr, w_ptr, y_ptr, bias_ptr, q0, q1, q2, q3, taps_ptr, phase_ptr,
    N, C_IN_G, ID, IH, IW, C_OUT_G, OD, OH, OW, QD, QH, QW, TAPS, MAX_TAPS, PHASES,
    ad, ah, aw, bd, bh, bw,
    sx_n, sx_c, sx_d, sx_h, sx_w,
    sy_n, sy_c, sy_d, sy_h, sy_w,
    E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr, N_OPS: tl.constexpr, ONUMEL: tl.constexpr,
    POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    HAS_BIAS: tl.constexpr, UPCAST: tl.constexpr, F32X3: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    """One tile of rows ``q`` (``N x QD x QH x QW``) of phase ``program_id(1) % PHASES`` x output
    channels of group ``program_id(1) // PHASES``. Row ``q`` reads input ``q * (ad, ah, aw) +
    delta`` and writes output ``q * (bd, bh, bw) + r``: ``phase_ptr`` holds each phase's ``(taps,
    r_d, r_h, r_w)``, ``taps_ptr`` its ``(tap, delta_d, delta_h, delta_w)`` (``MAX_TAPS`` a phase).
    The weight is ``(C_out, TAPS, C_IN_G)`` contiguous."""
    g, phase, rn, col_ok, n, qd, qh, qw, count, od, oh, ow, row_ok = phase_tile(
        phase_ptr, PHASES, N, QD, QH, QW, C_OUT_G, OD, OH, OW, bd, bh, bw, BLOCK_M, BLOCK_N, GROUP_M)
    x_row = x_ptr + n * sx_n + (g * C_IN_G).to(tl.int64) * sx_c
    w_col = w_ptr + (g * C_OUT_G + tl.where(col_ok, rn, 0)).to(tl.int64) * (TAPS * C_IN_G)
    id0 = qd * ad
    ih0 = qh * ah
    iw0 = qw * aw
    rk = tl.arange(0, BLOCK_K)
    c_pad = tl.cdiv(C_IN_G, BLOCK_K) * BLOCK_K
    entries = taps_ptr + phase * (MAX_TAPS * 4)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, count * c_pad, BLOCK_K):
        # One step stays inside one tap (BLOCK_K divides the padded channel count).
        t = k // c_pad
        c = k - t * c_pad + rk
        tap = tl.load(entries + t * 4)
        idd = id0 + tl.load(entries + t * 4 + 1)
        ih = ih0 + tl.load(entries + t * 4 + 2)
        iw = iw0 + tl.load(entries + t * 4 + 3)
        ok = row_ok & (idd >= 0) & (idd < ID) & (ih >= 0) & (ih < IH) & (iw >= 0) & (iw < IW)
        c_ok = c < C_IN_G
        # Lanes outside the input are masked; their (possibly negative) offsets are never read.
        a = tl.load(x_row[:, None] + (idd * sx_d + ih * sx_h + iw * sx_w)[:, None] + c[None, :] * sx_c, mask=ok[:, None] & c_ok[None, :], other=0.0)
        b = tl.load(w_col[None, :] + (tap * C_IN_G + c)[:, None], mask=c_ok[:, None] & col_ok[None, :], other=0.0)
        acc = gemm_mma(a, b, acc, UPCAST, F32X3)

    conv_store_tile(
        acc, n, od, oh, ow, (g * C_OUT_G + rn).to(tl.int64), row_ok, col_ok, (tl.num_programs(1) // PHASES) * C_OUT_G, OD, OH, OW,
        y_ptr, sy_n, sy_c, sy_d, sy_h, sy_w, bias_ptr, HAS_BIAS, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS,
    )


def conv_tap_table(kernel: tuple, stride: tuple, padding: tuple, dilation: tuple, transposed: bool) -> tuple[list, list, int]:
    """The geometry's phases and tap table (plain Python lists): ``(phases, taps, max_taps)``;
    ``phases[p] = (taps in it, r_d, r_h, r_w)``, ``taps[p]`` its ``(tap, delta_d, delta_h,
    delta_w)`` entries, at most ``max_taps``. 3-D tuples (a 1-D or 2-D convolution has size-1
    leading dimensions)."""
    kd, kh, kw = kernel
    all_taps = [(a, b, c) for a in range(kd) for b in range(kh) for c in range(kw)]
    if not transposed:
        entry = [(i, *(k * dd - pp for k, dd, pp in zip(t, dilation, padding))) for i, t in enumerate(all_taps)]
        return [(len(entry), 0, 0, 0)], [entry], len(entry)
    phases, taps = [], []
    for r in [(a, b, c) for a in range(stride[0]) for b in range(stride[1]) for c in range(stride[2])]:
        entry = [
            (i, *((rr + pp - k * dd) // ss for rr, pp, k, dd, ss in zip(r, padding, t, dilation, stride)))
            for i, t in enumerate(all_taps)
            if all((rr + pp - k * dd) % ss == 0 for rr, pp, k, dd, ss in zip(r, padding, t, dilation, stride))
        ]
        phases.append((len(entry), *r))
        taps.append(entry)
    return phases, taps, max(1, max(len(e) for e in taps))


@functools.cache
def _tap_tensors(kernel, stride, padding, dilation, transposed, device) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The tap table (each phase's entries padded to ``max_taps``) and the phases as int32 tensors
    on ``device``, with ``max_taps`` and the number of phases: built once per geometry and device."""
    phases, taps, max_taps = conv_tap_table(kernel, stride, padding, dilation, transposed)
    flat = [v for entry in taps for row in entry + [(0, 0, 0, 0)] * (max_taps - len(entry)) for v in row]
    return phase_tensors(phases, flat, max_taps, device)


def phase_tensors(phases: list, flat: list[int], width: int, device) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """A phase table on ``device``: its entries (``flat``, ``width`` a phase) and its phases as
    int32 tensors, with ``width`` and the number of phases, as the phase-split kernels read them."""
    as_tensor = lambda values: torch.tensor(values, dtype=torch.int32, device=device)  # noqa: E731
    return as_tensor(flat), as_tensor([v for p in phases for v in p]), width, len(phases)


def conv_taps_configs(dtype: torch.dtype, c_in_g: int, precision: str = "tf32x3") -> list[triton.Config]:
    """Tile configurations autotuning measures on a GPU. The channel step is at most the
    group's input channels (rounded up to 16, the smallest tensor-core step)."""
    wide = 32 if dtype == torch.float32 else 64
    bk = min(wide, max(16, triton.next_power_of_2(c_in_g)))
    if dtype == torch.float32 and precision == "ieee":
        shapes = [(128, 64, 4, 3), (64, 128, 4, 3), (64, 64, 4, 4), (128, 128, 8, 3)]
    else:
        # The tiles the three-way products won with in the GEMM (128x64 and 64x64, 4 warps, 4
        # stages) and two neighbours: each configuration is a compilation a job waits for.
        shapes = [(128, 64, 4, 4), (64, 64, 4, 4), (64, 128, 4, 4), (128, 128, 8, 3)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": nn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=w, num_stages=s) for m, nn, w, s in shapes]


#: What re-tunes the tap-outer kernel: the sizes, the input's layout and the precision.
TAPS_TUNE_KEY = ["N", "C_IN_G", "ID", "IH", "IW", "C_OUT_G", "OD", "OH", "OW", "QD", "QH", "QW", "TAPS", "PHASES", "sx_c", "F32X3"]


def conv_taps(
    x, weight, bias=None, stride=1, padding=0, dilation=1, transposed=False, output_padding=0, groups=1,
    post: tuple | None = None, precision: str = "tf32x3", channels_last: bool = False, config: triton.Config | None = None,
) -> torch.Tensor:
    """``post(convolution(x, weight, bias, ...))`` with ``aten.convolution``'s arguments, the
    output contiguous; ``post``: ``(operands, program, scalars)``, the elementwise epilogue, its
    operands broadcastable to the output's shape. ``precision``: how float32 operands are
    multiplied (``kernels.gemm.tiles.GEMM_PRECISIONS``); ``channels_last``: make the input channel-innermost first."""
    y, epilogue, (s, p, d), (x5, w5, y5), f32x3 = conv_setup(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups, post, precision)
    if channels_last and x5.stride(1) != 1:
        x5 = x5.movedim(1, -1).contiguous().movedim(-1, 1)
    kernel = tuple(w5.shape[2:])
    taps = math.prod(kernel)
    if transposed:
        c_in_g, c_out_g = x.shape[1] // groups, w5.shape[1]
        # (C_in, C_out / groups, k...) -> (C_out, taps, C_in / groups), group by group.
        w_taps = w5.reshape(groups, c_in_g, c_out_g, taps).permute(0, 2, 3, 1).contiguous()
        rows = tuple(-(-o // st) for o, st in zip(y5.shape[2:], s))  # each phase's rows: ceil(O / stride)
        step_in, step_out = (1, 1, 1), s
    else:
        c_in_g, c_out_g = w5.shape[1], w5.shape[0] // groups
        # (C_out, C_in / groups, k...) -> (C_out, taps, C_in / groups): each tap's channels contiguous.
        w_taps = w5.permute(0, 2, 3, 4, 1).contiguous()
        rows, step_in, step_out = tuple(y5.shape[2:]), s, (1, 1, 1)
    table, phase, max_taps, phases = _tap_tensors(kernel, s, p, d, bool(transposed), x.device)
    args = [
        x5, w_taps, y5, bias if bias is not None else y5, *(epilogue.pop(f"q{k}") for k in range(4)), table, phase,
        x.shape[0], c_in_g, *x5.shape[2:], c_out_g, *y5.shape[2:], *rows, taps, max_taps, phases,
        *step_in, *step_out, *x5.stride(), *y5.stride(),
    ]
    constants = dict(epilogue, HAS_BIAS=bias is not None, UPCAST=not x.is_cuda, F32X3=f32x3)
    m = x.shape[0] * math.prod(rows)

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(c_out_g, meta["BLOCK_N"]), groups * phases)

    launch(conv_taps_kernel, grid, args, constants, TAPS_TUNE_KEY, on_gpu=x.is_cuda, config=config,
           cpu_config=triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 4}, num_warps=4, num_stages=1),
           gpu_configs=lambda: conv_taps_configs(x.dtype, c_in_g, "tf32x3" if f32x3 else "ieee"))
    return y.to(x.dtype)
