"""Softmax and log-softmax over any dimension, with an elementwise epilogue fused before the store.

The input is viewed as ``(outer, R, inner)`` (made contiguous first if it is not). Rows that fit
in registers (``inner == 1``, ``R`` up to 16384) are read once; longer rows are read twice: an
online pass keeps a running maximum and a rescaled sum per lane, then a pass writes. Softmax over
an inner dimension (``inner > 1``) tiles rows by columns, reading along the contiguous axis.
Everything accumulates in float32; the result is written in the input's dtype (or ``dtype``).
Loop bounds are compile-time constants (a kernel per reduced length: shapes are fixed per
workload), which Triton's CPU interpreter also needs.
"""

import math

import torch
import triton
import triton.language as tl

from kernels.elementwise.kernel import EW_TILE_MAX, KernelUnsupported, ew_bench, ew_epilogue_args, ew_row_tile_configs, ew_row_tile_prune
from kernels.elementwise.program import ew_epilogue, ew_stored

SM_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _sm_pre(x, idx, mask, k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
            N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr, OTHER):  # fmt: skip
    """The prologue applied to loaded values (a scale and a masked fill before attention's
    softmax); lanes outside the tile hold ``OTHER`` again after it. Without a prologue the
    loaded values pass as they are (the kernels compile as before it existed)."""
    if len(PRE) > 0:
        x = ew_epilogue(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS)
        x = tl.where(mask, x, OTHER)
    return x


@triton.autotune(configs=ew_row_tile_configs(), key=["R", "rows"], prune_configs_by={"early_config_prune": ew_row_tile_prune}, do_bench=ew_bench)
@triton.jit
def _sm_rows_single(
    x_ptr, out_ptr, rows, R,
    k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
    N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    LOG: tl.constexpr, BIG: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    r = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, BLOCK)[None, :]
    mask = (r < rows) & (c < R)
    if BIG:
        r = r.to(tl.int64)
    idx = r * R + c
    x = tl.load(x_ptr + idx, mask=mask, other=-float("inf")).to(tl.float32)
    x = _sm_pre(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS, -float("inf"))
    m = tl.max(x, axis=1)[:, None]
    e = tl.exp(x - m)
    s = tl.sum(e, axis=1)[:, None]
    if LOG:
        y = x - m - tl.log(s)
    else:
        y = e / s
    y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def _sm_loop_configs():
    return [triton.Config({"CHUNK": c}, num_warps=w) for c, w in ((4096, 8), (4096, 16), (8192, 16), (2048, 8))]


@triton.autotune(configs=_sm_loop_configs(), key=["R", "rows"], do_bench=ew_bench)
@triton.jit
def _sm_rows_loop(
    x_ptr, out_ptr, rows, R: tl.constexpr,
    k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
    N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    LOG: tl.constexpr, BIG: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    if BIG:
        row = row.to(tl.int64)
    base = row * R
    c = tl.arange(0, CHUNK)
    m = tl.full([CHUNK], -3.0e38, tl.float32)
    s = tl.zeros([CHUNK], tl.float32)
    for start in range(0, R, CHUNK):
        mask = start + c < R
        x = tl.load(x_ptr + base + start + c, mask=mask, other=-float("inf")).to(tl.float32)
        x = _sm_pre(x, base + start + c, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS, -float("inf"))
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    top = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - top), axis=0)
    for start in range(0, R, CHUNK):
        mask = start + c < R
        idx = base + start + c
        x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        x = _sm_pre(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS, 0.0)
        if LOG:
            y = x - top - tl.log(total)
        else:
            y = tl.exp(x - top) / total
        y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
        tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def _sm_cols_configs():
    return [triton.Config({"BLOCK_I": b, "BLOCK_R": r}, num_warps=w) for b, r, w in ((64, 32, 8), (64, 8, 4), (128, 8, 8), (32, 32, 4))]


def _sm_cols_prune(configs, named_args, **kwargs):
    if kwargs["SINGLE"]:
        # The whole reduced axis is one tile: only the column tile and warps are searched.
        r = kwargs["R_POW2"]
        seen, fit = set(), []
        for c in configs:
            key = (c.kwargs["BLOCK_I"], c.num_warps)
            if key not in seen and c.kwargs["BLOCK_I"] * r <= EW_TILE_MAX:
                seen.add(key)
                fit.append(triton.Config({"BLOCK_I": c.kwargs["BLOCK_I"], "BLOCK_R": r}, num_warps=c.num_warps))
        return fit or [triton.Config({"BLOCK_I": 16, "BLOCK_R": r}, num_warps=4)]
    return configs


@triton.autotune(configs=_sm_cols_configs(), key=["R", "inner", "outer"], prune_configs_by={"early_config_prune": _sm_cols_prune}, do_bench=ew_bench)
@triton.jit
def _sm_cols(
    x_ptr, out_ptr, outer, R: tl.constexpr, inner,
    k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
    N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    LOG: tl.constexpr, BIG: tl.constexpr, SINGLE: tl.constexpr, R_POW2: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
):  # fmt: skip
    o = tl.program_id(0)
    if BIG:
        o = o.to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)[None, :]
    base = o * R * inner + i
    rr = tl.arange(0, BLOCK_R)[:, None]
    if SINGLE:
        mask = (rr < R) & (i < inner)
        idx = base + rr * inner
        x = tl.load(x_ptr + idx, mask=mask, other=-float("inf")).to(tl.float32)
        x = _sm_pre(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS, -float("inf"))
        top = tl.max(x, axis=0)[None, :]
        e = tl.exp(x - top)
        total = tl.sum(e, axis=0)[None, :]
        if LOG:
            y = x - top - tl.log(total)
        else:
            y = e / total
        y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
        tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)
    else:
        m = tl.full([BLOCK_I], -3.0e38, tl.float32)
        s = tl.zeros([BLOCK_I], tl.float32)
        for start in range(0, R, BLOCK_R):
            mask = (start + rr < R) & (i < inner)
            x = tl.load(x_ptr + base + (start + rr) * inner, mask=mask, other=-float("inf")).to(tl.float32)
            x = _sm_pre(x, base + (start + rr) * inner, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS, -float("inf"))
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[None, :]), axis=0)
            m = m_new
        for start in range(0, R, BLOCK_R):
            mask = (start + rr < R) & (i < inner)
            idx = base + (start + rr) * inner
            x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
            x = _sm_pre(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS, 0.0)
            if LOG:
                y = x - m[None, :] - tl.log(s)[None, :]
            else:
                y = tl.exp(x - m[None, :]) / s[None, :]
            y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
            tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, dim: int, log: bool = False, post=None, dtype: torch.dtype | None = None, pre=None) -> torch.Tensor:
    """``softmax(pre(x), dim)`` (``log_softmax`` when ``log``), then the epilogue ``post``
    (``(operands, program, scalars)``, see ``ew_epilogue_args``; ``pre`` alike, its operands
    broadcast to ``x``'s shape), as a new contiguous tensor of ``dtype`` (default: ``x``'s)."""
    if not isinstance(x, torch.Tensor) or x.dtype not in SM_DTYPES or x.dim() == 0:
        raise KernelUnsupported("softmax reads a float32/float16/bfloat16 tensor of at least one dimension")
    dtype = dtype or x.dtype
    if dtype not in SM_DTYPES:
        raise KernelUnsupported(f"softmax cannot write {dtype}")
    dim = dim % x.dim()
    x = x.contiguous()
    shape = tuple(x.shape)
    R, inner, outer = shape[dim], math.prod(shape[dim + 1 :]), math.prod(shape[:dim])
    out = torch.empty(shape, dtype=dtype, device=x.device)
    if x.numel() == 0:
        return out
    epilogue = {**ew_epilogue_args(pre, shape, x, prefix="pre"), **ew_epilogue_args(post, shape, out)}
    big = x.numel() >= 2**31 - 2**16
    if inner == 1:
        if triton.next_power_of_2(R) <= EW_TILE_MAX:
            block = triton.next_power_of_2(R)
            grid = lambda meta: (triton.cdiv(outer, meta["ROWS"]),)
            _sm_rows_single[grid](x, out, outer, R, **epilogue, LOG=log, BIG=big, BLOCK=block)
        else:
            _sm_rows_loop[(outer,)](x, out, outer, R, **epilogue, LOG=log, BIG=big)
    else:
        r_pow2 = triton.next_power_of_2(R)
        single = r_pow2 * 16 <= EW_TILE_MAX
        grid = lambda meta: (outer, triton.cdiv(inner, meta["BLOCK_I"]))
        _sm_cols[grid](x, out, outer, R, inner, **epilogue, LOG=log, BIG=big, SINGLE=single, R_POW2=r_pow2)
    return out
