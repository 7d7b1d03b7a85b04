"""Row normalisations: LayerNorm, RMSNorm and GroupNorm (InstanceNorm is GroupNorm with a group
per channel), each with its affine transform and an elementwise epilogue fused before the store.

A row is the contiguous run that one set of statistics covers: the normalised trailing
dimensions (LayerNorm, RMSNorm) or one group of channels of one sample (GroupNorm). The affine
weight and bias are indexed per element of the row (``channel = (row % groups) * per_group +
column // spatial``). Rows up to 16384 elements are read once; longer rows are read twice: a
Welford pass (per lane, merged with Chan's formula, in float32) and a normalising pass. When long
rows are too few to fill the GPU (LayerNorm over a whole sample), each row is split: the
statistics come from the split Welford partials of ``kernels/batchnorm`` and the normalising
pass runs over (row, segment) tiles.
"""

import math

import torch
import triton
import triton.language as tl

from kernels.batchnorm.kernel import bn_stats
from kernels.elementwise.kernel import EW_TILE_MAX, KernelUnsupported, ew_bench, ew_epilogue_args, ew_row_tile_configs, ew_row_tile_prune
from kernels.elementwise.program import ew_epilogue, ew_stored

#: Fewer rows than this, each longer than LN_SPLIT_MIN, are split into segments.
LN_SPLIT_ROWS = 264
LN_SPLIT_MIN = 1 << 16
LN_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _ln_affine(y, row, col, w_ptr, b_ptr, mask, G: tl.constexpr, CPG: tl.constexpr, HW: tl.constexpr,
               HAS_W: tl.constexpr, HAS_B: tl.constexpr):  # fmt: skip
    channel = (row % G) * CPG + col // HW
    if HAS_W:
        y = y * tl.load(w_ptr + channel, mask=mask, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(b_ptr + channel, mask=mask, other=0.0).to(tl.float32)
    return y


@triton.autotune(configs=ew_row_tile_configs(), key=["rows", "R"], prune_configs_by={"early_config_prune": ew_row_tile_prune}, do_bench=ew_bench)
@triton.jit
def _ln_rows_single(
    x_ptr, w_ptr, b_ptr, out_ptr, rows, R, eps,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    RMS: tl.constexpr, G: tl.constexpr, CPG: tl.constexpr, HW: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    BIG: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    col = tl.arange(0, BLOCK)[None, :]
    mask = (row < rows) & (col < R)
    if BIG:
        row = row.to(tl.int64)
    idx = row * R + col
    x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    if RMS:
        d = x
    else:
        d = tl.where(mask, x - (tl.sum(x, axis=1) / R)[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / R + eps)
    y = _ln_affine(d * rstd[:, None], row, col, w_ptr, b_ptr, mask, G, CPG, HW, HAS_W, HAS_B)
    y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def _ln_loop_configs():
    return [triton.Config({"CHUNK": c}, num_warps=w) for c, w in ((4096, 8), (4096, 16), (8192, 16), (2048, 8))]


@triton.autotune(configs=_ln_loop_configs(), key=["rows", "R"], do_bench=ew_bench)
@triton.jit
def _ln_rows_loop(
    x_ptr, w_ptr, b_ptr, out_ptr, rows, R: tl.constexpr, eps,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    RMS: tl.constexpr, G: tl.constexpr, CPG: tl.constexpr, HW: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    BIG: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    if BIG:
        row = row.to(tl.int64)
    base = row * R
    c = tl.arange(0, CHUNK)
    count = tl.zeros([CHUNK], tl.float32)
    mean = tl.zeros([CHUNK], tl.float32)
    m2 = tl.zeros([CHUNK], tl.float32)
    for start in range(0, R, CHUNK):
        mask = start + c < R
        x = tl.load(x_ptr + base + start + c, mask=mask, other=0.0).to(tl.float32)
        if RMS:
            m2 += x * x
        else:
            # Welford per lane: each lane's running mean and sum of squared deviations. Every
            # lane still reading has read start // CHUNK + 1 values (a lane past the row's end
            # stays past it): one reciprocal a step, not a division a value.
            count += mask.to(tl.float32)
            delta = tl.where(mask, x - mean, 0.0)
            mean += delta * (1.0 / (start // CHUNK + 1))
            m2 += delta * tl.where(mask, x - mean, 0.0)
    if RMS:
        mu = 0.0
        var = tl.sum(m2, axis=0) / R
    else:
        mu = tl.sum(count * mean, axis=0) / R
        dev = mean - mu
        var = (tl.sum(m2, axis=0) + tl.sum(count * dev * dev, axis=0)) / R
    rstd = 1.0 / tl.sqrt(var + eps)
    for start in range(0, R, CHUNK):
        col = start + c
        mask = col < R
        idx = base + col
        x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        y = _ln_affine((x - mu) * rstd, row, col, w_ptr, b_ptr, mask, G, CPG, HW, HAS_W, HAS_B)
        y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
        tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def _ln_apply_configs():
    return [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((2048, 4), (4096, 8), (1024, 4))]


@triton.autotune(configs=_ln_apply_configs(), key=["rows", "R"], do_bench=ew_bench)
@triton.jit
def _ln_apply(
    x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, out_ptr, rows, R,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    RMS: tl.constexpr, G: tl.constexpr, CPG: tl.constexpr, HW: tl.constexpr, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
    BIG: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    if BIG:
        row = row.to(tl.int64)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = col < R
    idx = row * R + col
    x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    y = (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row)
    y = _ln_affine(y, row, col, w_ptr, b_ptr, mask, G, CPG, HW, HAS_W, HAS_B)
    y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def _ln_param(t, numel: int, x: torch.Tensor, what: str):
    if t is None:
        return None
    if not isinstance(t, torch.Tensor) or t.numel() != numel or t.device != x.device or t.dtype not in LN_DTYPES:
        raise KernelUnsupported(f"the {what} must be a float tensor of {numel} elements on the input's device")
    return t.contiguous()


def _ln_launch(x, rows, R, weight, bias, eps, post, dtype, rms, groups, per_group, spatial):
    if not isinstance(x, torch.Tensor) or x.dtype not in LN_DTYPES:
        raise KernelUnsupported("normalisation reads a float32/float16/bfloat16 tensor")
    dtype = dtype or x.dtype
    if dtype not in LN_DTYPES:
        raise KernelUnsupported(f"normalisation cannot write {dtype}")
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    if x.numel() == 0:
        return out
    channels = groups * per_group
    w = _ln_param(weight, channels, x, "weight")
    b = _ln_param(bias, channels, x, "bias")
    args = dict(
        **ew_epilogue_args(post, tuple(x.shape), out),
        RMS=rms, G=groups, CPG=per_group, HW=spatial, HAS_W=w is not None, HAS_B=b is not None,
        BIG=x.numel() >= 2**31 - 2**16,
    )  # fmt: skip
    w = w if w is not None else out
    b = b if b is not None else out
    if rows < LN_SPLIT_ROWS and R > LN_SPLIT_MIN:
        mean, var = bn_stats(x.view(1, rows, R))
        if rms:
            var, mean = var + mean * mean, torch.zeros_like(mean)
        rstd = torch.rsqrt(var + eps)
        grid = lambda meta: (rows, triton.cdiv(R, meta["BLOCK"]))
        _ln_apply[grid](x, w, b, mean, rstd, out, rows, R, **args)
    elif triton.next_power_of_2(R) <= EW_TILE_MAX:
        grid = lambda meta: (triton.cdiv(rows, meta["ROWS"]),)
        _ln_rows_single[grid](x, w, b, out, rows, R, float(eps), **args, BLOCK=triton.next_power_of_2(R))
    else:
        _ln_rows_loop[(rows,)](x, w, b, out, rows, R, float(eps), **args)
    return out


def layer_norm(x, normalized_ndim: int, weight=None, bias=None, eps: float = 1e-5, post=None, dtype=None) -> torch.Tensor:
    """``F.layer_norm`` over the last ``normalized_ndim`` dimensions, then the epilogue ``post``."""
    R = math.prod(x.shape[x.dim() - normalized_ndim :])
    return _ln_launch(x, x.numel() // max(R, 1), R, weight, bias, eps, post, dtype, False, 1, R, 1)


def rms_norm(x, normalized_ndim: int, weight=None, eps: float = 1e-6, post=None, dtype=None) -> torch.Tensor:
    """``x * rsqrt(mean(x**2) + eps) * weight`` over the last ``normalized_ndim`` dimensions."""
    R = math.prod(x.shape[x.dim() - normalized_ndim :])
    return _ln_launch(x, x.numel() // max(R, 1), R, weight, None, eps, post, dtype, True, 1, R, 1)


def group_norm(x, groups: int, weight=None, bias=None, eps: float = 1e-5, post=None, dtype=None) -> torch.Tensor:
    """``F.group_norm`` of an ``(N, C, *spatial)`` tensor, then the epilogue ``post``."""
    if x.dim() < 2 or x.shape[1] % groups:
        raise KernelUnsupported("group norm needs (N, C, ...) with C divisible by the groups")
    channels = x.shape[1]
    spatial = math.prod(x.shape[2:])
    R = channels // groups * spatial
    return _ln_launch(x, x.shape[0] * groups, R, weight, bias, eps, post, dtype, False, groups, channels // groups, spatial)
