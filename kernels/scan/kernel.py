"""Cumulative sums and products over one dimension, forward or reversed (``x.flip(d).cumsum(d)
.flip(d)`` without the flips), with an elementwise prologue on the values read (a mask) and an
epilogue on the results.

The input is viewed as ``(outer, R, inner)``. Each program scans whole rows (or a tile of
columns of an inner axis) chunk by chunk, carrying the running total in float32 from one chunk
to the next, so a row is read once and written once whatever its length.
"""

import math

import torch
import triton
import triton.language as tl

from kernels.elementwise.kernel import KernelUnsupported, ew_bench, ew_epilogue_args
from kernels.elementwise.program import ew_epilogue, ew_stored

SC_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _sc_mul(a, b):
    return a * b


@triton.jit
def _sc_step(x, carry, AXIS: tl.constexpr, PROD: tl.constexpr, REVERSE: tl.constexpr):
    """The chunk's scan continued from ``carry`` (per row or column), and the new carry."""
    if PROD:
        scanned = tl.cumprod(x, axis=AXIS, reverse=REVERSE) * tl.expand_dims(carry, AXIS)
        carry = carry * tl.reduce(x, AXIS, _sc_mul)
    else:
        scanned = tl.cumsum(x, axis=AXIS, reverse=REVERSE) + tl.expand_dims(carry, AXIS)
        carry = carry + tl.sum(x, axis=AXIS)
    return scanned, carry


def _sc_rows_configs():
    return [triton.Config({"ROWS": 1, "CHUNK": c}, num_warps=w) for c, w in ((4096, 8), (2048, 4), (1024, 4))]


def _sc_rows_prune(configs, named_args, **kwargs):
    width = triton.next_power_of_2(named_args["R"])
    fit = [c for c in configs if c.kwargs["CHUNK"] <= max(width, 1024) and c.kwargs["ROWS"] <= max(named_args["rows"], 1)]
    return fit or configs[:1]


@triton.autotune(configs=_sc_rows_configs(), key=["rows", "R"], prune_configs_by={"early_config_prune": _sc_rows_prune}, do_bench=ew_bench)
@triton.jit
def _sc_rows(
    x_ptr, out_ptr, rows, R: tl.constexpr,
    k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
    N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    PROD: tl.constexpr, REVERSE: tl.constexpr, BIG: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = row < rows
    if BIG:
        row = row.to(tl.int64)
    c = tl.arange(0, CHUNK)[None, :]
    if PROD:
        carry = tl.full([ROWS], 1.0, tl.float32)
    else:
        carry = tl.zeros([ROWS], tl.float32)
    for k in range(0, (R + CHUNK - 1) // CHUNK):
        if REVERSE:
            start = ((R + CHUNK - 1) // CHUNK - 1 - k) * CHUNK
        else:
            start = k * CHUNK
        mask = live[:, None] & (start + c < R)
        idx = row[:, None] * R + start + c
        x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        x = ew_epilogue(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS)
        x = tl.where(mask, x, 1.0 if PROD else 0.0)
        y, carry = _sc_step(x, carry, 1, PROD, REVERSE)
        y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
        tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def _sc_cols_configs():
    return [triton.Config({"BLOCK_R": r, "BLOCK_I": i}, num_warps=4) for r, i in ((32, 64), (16, 128), (32, 32), (16, 64))]


def _sc_cols_prune(configs, named_args, **kwargs):
    inner = triton.next_power_of_2(named_args["inner"])
    fit = [c for c in configs if c.kwargs["BLOCK_I"] <= max(inner, 32)]
    return fit or configs[:1]


@triton.autotune(configs=_sc_cols_configs(), key=["outer", "R", "inner"], prune_configs_by={"early_config_prune": _sc_cols_prune}, do_bench=ew_bench)
@triton.jit
def _sc_cols(
    x_ptr, out_ptr, outer, R: tl.constexpr, inner,
    k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
    N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    PROD: tl.constexpr, REVERSE: tl.constexpr, BIG: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
):  # fmt: skip
    o = tl.program_id(0)
    if BIG:
        o = o.to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    live = i < inner
    rr = tl.arange(0, BLOCK_R)[:, None]
    if PROD:
        carry = tl.full([BLOCK_I], 1.0, tl.float32)
    else:
        carry = tl.zeros([BLOCK_I], tl.float32)
    for k in range(0, (R + BLOCK_R - 1) // BLOCK_R):
        if REVERSE:
            start = ((R + BLOCK_R - 1) // BLOCK_R - 1 - k) * BLOCK_R
        else:
            start = k * BLOCK_R
        mask = (start + rr < R) & live[None, :]
        idx = (o * R + start + rr) * inner + i[None, :]
        x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        x = ew_epilogue(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS)
        x = tl.where(mask, x, 1.0 if PROD else 0.0)
        y, carry = _sc_step(x, carry, 0, PROD, REVERSE)
        y = ew_epilogue(y, idx, mask, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
        tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def scan(x, dim: int, op: str = "sum", reverse: bool = False, pre=None, post=None, dtype=None) -> torch.Tensor:
    """``torch.cumsum(pre(x), dim)`` (``op="prod"``: ``cumprod``; ``reverse``: from the end of
    the dimension), then ``post``, as a new contiguous tensor of ``dtype`` (default: ``x``'s)."""
    if op not in ("sum", "prod"):
        raise KernelUnsupported(f"unknown scan {op!r}")
    if not isinstance(x, torch.Tensor) or x.dtype not in SC_DTYPES or x.dim() == 0:
        raise KernelUnsupported("scans read float32/float16/bfloat16 tensors of at least one dimension")
    dtype = dtype or x.dtype
    if dtype not in SC_DTYPES:
        raise KernelUnsupported(f"a scan cannot write {dtype}")
    dim = dim % x.dim()
    x = x.contiguous()
    shape = tuple(x.shape)
    outer, R, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1 :])
    out = torch.empty(shape, dtype=dtype, device=x.device)
    if x.numel() == 0:
        return out
    args = dict(
        **ew_epilogue_args(pre, shape, x, prefix="pre"),
        **ew_epilogue_args(post, shape, out),
        PROD=op == "prod", REVERSE=bool(reverse), BIG=x.numel() >= 2**31 - 2**16,
    )  # fmt: skip
    if inner == 1:
        grid = lambda meta: (triton.cdiv(outer, meta["ROWS"]),)
        _sc_rows[grid](x, out, outer, R, **args)
    else:
        grid = lambda meta: (outer, triton.cdiv(inner, meta["BLOCK_I"]))
        _sc_cols[grid](x, out, outer, R, inner, **args)
    return out
