"""Reductions over a run of consecutive dimensions: sum, mean, max, min, prod, argmax, argmin,
max/min with indices, L1/L2/inf norms and log-sum-exp, with an elementwise prologue on the values
read (``x * mask``, ``x ** 2``) and an epilogue on the results.

The input is viewed as ``(outer, R, inner)``. Rows (``inner == 1``) are walked in chunks with an
accumulator per lane; an inner reduced axis is walked by tiles along the contiguous columns. When
there are too few results to fill the GPU (a full reduction, say), the reduced axis is split
into segments reduced in parallel and their partials are combined (a second, small reduction).
Accumulation is float32; argmax/argmin return the first index of the extreme value.
"""

import math

import torch
import triton
import triton.language as tl

from kernels.elementwise.kernel import KernelUnsupported, ew_bench, ew_chain, ew_epilogue_args
from kernels.elementwise.opcodes import EW_OPERAND, EW_SCALAR
from kernels.elementwise.program import ew_epilogue, ew_stored

#: Reduction op codes.
RD_OPS = {"sum": 0, "mean": 1, "max": 2, "min": 3, "prod": 4, "argmax": 5, "argmin": 6, "norm1": 7, "norm2": 8, "norm_inf": 9, "logsumexp": 10}
RD_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: Below this many results the reduced axis is split, when it is at least RD_SPLIT_MIN long.
RD_FEW_RESULTS = 1024
RD_SPLIT_MIN = 1 << 15


@triton.jit
def _rd_init(OP: tl.constexpr, A: tl.constexpr, B: tl.constexpr):
    """An ``[A, B]`` tile of the op's neutral value (the running maximum's start for log-sum-exp)."""
    if OP == 2 or OP == 5:
        v = tl.full([A, B], -float("inf"), tl.float32)
    elif OP == 3 or OP == 6:
        v = tl.full([A, B], float("inf"), tl.float32)
    elif OP == 4:
        v = tl.full([A, B], 1.0, tl.float32)
    elif OP == 10:
        v = tl.full([A, B], -3.0e38, tl.float32)
    else:
        v = tl.zeros([A, B], tl.float32)
    return v


@triton.jit
def _rd_update(OP: tl.constexpr, acc, aux, x, pos):
    """One more value per lane: ``acc`` holds the running result (the running maximum for
    log-sum-exp), ``aux`` the index (arg ops) or the rescaled sum (log-sum-exp)."""
    if OP == 0 or OP == 1:
        acc = acc + x
    elif OP == 2:
        acc = tl.maximum(acc, x)
    elif OP == 3:
        acc = tl.minimum(acc, x)
    elif OP == 4:
        acc = acc * x
    elif OP == 5:
        better = x > acc
        acc = tl.where(better, x, acc)
        aux = tl.where(better, pos, aux)
    elif OP == 6:
        better = x < acc
        acc = tl.where(better, x, acc)
        aux = tl.where(better, pos, aux)
    elif OP == 7:
        acc = acc + tl.abs(x)
    elif OP == 8:
        acc = acc + x * x
    elif OP == 9:
        acc = tl.maximum(acc, tl.abs(x))
    else:
        top = tl.maximum(acc, x)
        aux = aux * tl.exp(acc - top) + tl.exp(x - top)
        acc = top
    return acc, aux


@triton.jit
def _rd_mul(a, b):
    return a * b


@triton.jit
def _rd_finish(OP: tl.constexpr, acc, aux, AXIS: tl.constexpr, R: tl.constexpr, RAW: tl.constexpr):
    """The lanes' accumulators reduced along ``AXIS``: (value, index). ``RAW``: a partial for a
    second reduction (sums not yet divided or rooted)."""
    index = tl.min(aux, axis=AXIS)
    if OP == 0 or OP == 7:
        value = tl.sum(acc, axis=AXIS)
    elif OP == 1:
        value = tl.sum(acc, axis=AXIS)
        if not RAW:
            value = value / R
    elif OP == 2 or OP == 9:
        value = tl.max(acc, axis=AXIS)
    elif OP == 3:
        value = tl.min(acc, axis=AXIS)
    elif OP == 4:
        value = tl.reduce(acc, AXIS, _rd_mul)
    elif OP == 5:
        value = tl.max(acc, axis=AXIS)
        index = tl.min(tl.where(acc == tl.expand_dims(value, AXIS), aux, 2147483647), axis=AXIS)
    elif OP == 6:
        value = tl.min(acc, axis=AXIS)
        index = tl.min(tl.where(acc == tl.expand_dims(value, AXIS), aux, 2147483647), axis=AXIS)
    elif OP == 8:
        value = tl.sum(acc, axis=AXIS)
        if not RAW:
            value = tl.sqrt(value)
    else:
        value = tl.max(acc, axis=AXIS)
        value = value + tl.log(tl.sum(aux * tl.exp(acc - tl.expand_dims(value, AXIS)), axis=AXIS))
    return value, index


def _rd_rows_configs():
    return [triton.Config({"ROWS": r, "CHUNK": c}, num_warps=w) for r, c, w in ((1, 4096, 8), (1, 1024, 4), (4, 1024, 8), (4, 4096, 8))]


def _rd_rows_prune(configs, named_args, **kwargs):
    width = triton.next_power_of_2(named_args["R"])
    rows = named_args["rows"]
    if width <= 1024:
        # Short rows: a chunk is the whole row, and a program takes many rows.
        many = [r for r in (64, 16, 4, 1) if r * width <= 16384 and (r == 1 or r <= rows)][:2]
        return [triton.Config({"ROWS": r, "CHUNK": max(width, 16)}, num_warps=w) for r in many for w in (4, 8) if w * 32 <= r * max(width, 16)] or configs[:1]
    fit = [c for c in configs if c.kwargs["CHUNK"] <= width and c.kwargs["ROWS"] <= max(rows, 1)]
    fit = [c for c in fit if c.kwargs["ROWS"] * c.kwargs["CHUNK"] <= 16384 and c.num_warps * 32 <= c.kwargs["ROWS"] * c.kwargs["CHUNK"]]
    return fit or configs[:1]


@triton.autotune(configs=_rd_rows_configs(), key=["rows", "R"], prune_configs_by={"early_config_prune": _rd_rows_prune}, do_bench=ew_bench)
@triton.jit
def _rd_rows(
    x_ptr, out_ptr, idx_ptr, rows, R: tl.constexpr,
    k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
    N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    OP: tl.constexpr, RAW: tl.constexpr, WITH_VALUE: tl.constexpr, WITH_INDEX: tl.constexpr, BIG: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = row < rows
    if BIG:
        row = row.to(tl.int64)
    c = tl.arange(0, CHUNK)[None, :]
    neutral = _rd_init(OP, ROWS, CHUNK)
    acc = neutral
    if OP == 10:
        aux = tl.zeros([ROWS, CHUNK], tl.float32)
    else:
        aux = tl.zeros([ROWS, CHUNK], tl.int32) + 2147483647
    for start in range(0, R, CHUNK):
        mask = live[:, None] & (start + c < R)
        idx = row[:, None] * R + start + c
        x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        x = ew_epilogue(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS)
        x = tl.where(mask, x, neutral)
        acc, aux = _rd_update(OP, acc, aux, x, start + c + tl.zeros([ROWS, CHUNK], tl.int32))
    value, index = _rd_finish(OP, acc, aux, 1, R, RAW)
    value = ew_epilogue(value, row, live, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    if WITH_VALUE:
        tl.store(out_ptr + row, ew_stored(value, out_ptr.dtype.element_ty), mask=live)
    if WITH_INDEX:
        tl.store(idx_ptr + row, index.to(tl.int64), mask=live)


def _rd_cols_configs():
    # Wide column tiles with more warps keep more loads in flight where the rows are not 16-byte
    # aligned (an odd inner length), when each lane reads one element a load.
    narrow = [triton.Config({"BLOCK_R": r, "BLOCK_I": i}, num_warps=4) for r, i in ((32, 64), (8, 128), (32, 32), (8, 64))]
    return narrow + [triton.Config({"BLOCK_R": r, "BLOCK_I": i}, num_warps=8) for r, i in ((16, 256), (8, 512), (32, 256))]


def _rd_cols_prune(configs, named_args, **kwargs):
    inner = triton.next_power_of_2(named_args["inner"])
    fit = [c for c in configs if c.kwargs["BLOCK_I"] <= max(inner, 32) and c.kwargs["BLOCK_R"] * c.kwargs["BLOCK_I"] <= 8192]
    return fit or configs[:1]


@triton.autotune(configs=_rd_cols_configs(), key=["outer", "R", "inner"], prune_configs_by={"early_config_prune": _rd_cols_prune}, do_bench=ew_bench)
@triton.jit
def _rd_cols(
    x_ptr, out_ptr, idx_ptr, outer, R: tl.constexpr, inner,
    k0, k1, k2, k3, F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
    N_PRE: tl.constexpr, INUMEL: tl.constexpr, PRE: tl.constexpr, PRE_SCALARS: tl.constexpr,
    q0, q1, q2, q3, E0: tl.constexpr, E1: tl.constexpr, E2: tl.constexpr, E3: tl.constexpr,
    N_OPS: tl.constexpr, ONUMEL: tl.constexpr, POST: tl.constexpr, POST_SCALARS: tl.constexpr,
    OP: tl.constexpr, RAW: tl.constexpr, WITH_VALUE: tl.constexpr, WITH_INDEX: tl.constexpr, BIG: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr,
):  # fmt: skip
    o = tl.program_id(0)
    if BIG:
        o = o.to(tl.int64)
    i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    live = i < inner
    rr = tl.arange(0, BLOCK_R)[:, None]
    neutral = _rd_init(OP, BLOCK_R, BLOCK_I)
    acc = neutral
    if OP == 10:
        aux = tl.zeros([BLOCK_R, BLOCK_I], tl.float32)
    else:
        aux = tl.zeros([BLOCK_R, BLOCK_I], tl.int32) + 2147483647
    for start in range(0, R, BLOCK_R):
        mask = (start + rr < R) & live[None, :]
        idx = (o * R + start + rr) * inner + i[None, :]
        x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        x = ew_epilogue(x, idx, mask, k0, k1, k2, k3, F0, F1, F2, F3, N_PRE, INUMEL, PRE, PRE_SCALARS)
        x = tl.where(mask, x, neutral)
        acc, aux = _rd_update(OP, acc, aux, x, start + rr + tl.zeros([BLOCK_R, BLOCK_I], tl.int32))
    value, index = _rd_finish(OP, acc, aux, 0, R, RAW)
    out = o * inner + i
    value = ew_epilogue(value, out, live, q0, q1, q2, q3, E0, E1, E2, E3, N_OPS, ONUMEL, POST, POST_SCALARS)
    if WITH_VALUE:
        tl.store(out_ptr + out, ew_stored(value, out_ptr.dtype.element_ty), mask=live)
    if WITH_INDEX:
        tl.store(idx_ptr + out, index.to(tl.int64), mask=live)


def _rd_launch(x, outer, R, inner, op, raw, values, indices, pre, post, out_shape):
    """One reduction pass of the contiguous ``x`` viewed as ``(outer, R, inner)`` into the flat
    ``values``/``indices`` (either may be None) of the result's ``out_shape``."""
    dummy = values if values is not None else indices
    args = dict(
        **ew_epilogue_args(pre, tuple(x.shape), x, prefix="pre"),
        **ew_epilogue_args(post, tuple(out_shape), dummy),
        OP=RD_OPS[op], RAW=raw, WITH_VALUE=values is not None, WITH_INDEX=indices is not None, BIG=x.numel() >= 2**31 - 2**16,
    )  # fmt: skip
    out = values if values is not None else indices
    idx = indices if indices is not None else out
    if inner == 1:
        grid = lambda meta: (triton.cdiv(outer, meta["ROWS"]),)
        _rd_rows[grid](x, out, idx, outer, R, **args)
    else:
        grid = lambda meta: (outer, triton.cdiv(inner, meta["BLOCK_I"]))
        _rd_cols[grid](x, out, idx, outer, R, inner, **args)


def _rd_split(outer: int, R: int, inner: int) -> int:
    """How many segments to cut the reduced axis into (1: none), a divisor of ``R``."""
    if outer * inner >= RD_FEW_RESULTS or R < RD_SPLIT_MIN:
        return 1
    want = max(1, 2048 // max(outer * inner, 1))
    best = 1
    for k in range(2, min(want, R // 1024) + 1):
        if R % k == 0:
            best = k
    return best


def _rd_shift(program: tuple, by: int) -> tuple:
    """``program`` with its operand references moved up by ``by`` slots."""
    out = list(program)
    for s in range(0, len(out), 4):
        for j in (s + 2, s + 3):
            if EW_OPERAND <= out[j] < EW_SCALAR:
                out[j] += by
    return tuple(out)


def reduce(x, dims, op: str, keepdim: bool = False, pre=None, post=None, dtype=None):
    """``op`` of ``pre(x)`` over the consecutive dimensions ``dims`` (all when empty), then
    ``post``; ``argmax``/``argmin`` give int64 indices; ``max``/``min`` with ``dtype=torch.int64``
    are not offered: use ``reduce_with_indices``."""
    values, indices, shape = _rd_run(x, dims, op, keepdim, pre, post, dtype, with_index=op in ("argmax", "argmin"))
    return (indices if op in ("argmax", "argmin") else values).view(shape)


def reduce_with_indices(x, dim: int, op: str, keepdim: bool = False, pre=None):
    """``torch.max(x, dim)`` / ``torch.min(x, dim)``: (values, int64 indices)."""
    if op not in ("max", "min"):
        raise KernelUnsupported("values with indices come from max or min")
    values, indices, shape = _rd_run(x, [dim], op, keepdim, pre, None, None, with_index=True)
    return values.view(shape), indices.view(shape)


def _rd_run(x, dims, op, keepdim, pre, post, dtype, with_index):
    if op not in RD_OPS:
        raise KernelUnsupported(f"unknown reduction {op!r}")
    if not isinstance(x, torch.Tensor) or x.dtype not in RD_DTYPES or x.dim() == 0:
        raise KernelUnsupported("reductions read float32/float16/bfloat16 tensors of at least one dimension")
    dims = sorted(d % x.dim() for d in (dims if dims else range(x.dim())))
    if dims != list(range(dims[0], dims[-1] + 1)):
        raise KernelUnsupported("the reduced dimensions must be consecutive")
    if post is not None and (op in ("argmax", "argmin") or with_index):
        raise KernelUnsupported("index results take no epilogue")
    x = x.contiguous()
    shape = list(x.shape)
    outer, R, inner = math.prod(shape[: dims[0]]), math.prod(shape[dims[0] : dims[-1] + 1]), math.prod(shape[dims[-1] + 1 :])
    kept = [1 if d in dims else s for d, s in enumerate(shape)] if keepdim else [s for d, s in enumerate(shape) if d not in dims]
    dtype = dtype or x.dtype
    public, op = op, {"max": "argmax", "min": "argmin"}[op] if with_index and op in ("max", "min") else op
    if x.numel() == 0 or R == 0:
        raise KernelUnsupported("empty reductions are left to torch")
    values = None if public in ("argmax", "argmin") else torch.empty(outer * inner, dtype=dtype, device=x.device)
    indices = torch.empty(outer * inner, dtype=torch.int64, device=x.device) if with_index else None
    split = _rd_split(outer, R, inner)
    if split == 1:
        _rd_launch(x, outer, R, inner, op, False, values, indices, pre, post, kept)
        return values, indices, kept
    # Few results: reduce ``split`` segments of the axis in parallel, then their partials.
    seg = R // split
    part_v = torch.empty(outer * split * inner, dtype=torch.float32, device=x.device)
    part_i = torch.empty(outer * split * inner, dtype=torch.int64, device=x.device) if with_index else None
    _rd_launch(x, outer * split, seg, inner, op, True, part_v, part_i, pre, None, (outer * split * inner,))
    pv = part_v.view(outer, split, inner)
    final = _rd_combine(op, pv, R)
    if part_i is not None:
        pick = (pv.argmax(dim=1) if op == "argmax" else pv.argmin(dim=1)).unsqueeze(1)
        offsets = torch.arange(split, device=x.device).view(1, split, 1) * seg
        indices.copy_((part_i.view(outer, split, inner) + offsets).gather(1, pick).reshape(-1))
    if values is not None:
        if post is not None:
            operands, program, scalars = post
            final = ew_chain([final.reshape(kept), *operands], _rd_shift(program, 1), scalars, tuple(kept), dtype)
        values.copy_(final.reshape(-1))
    return values, indices, kept


def _rd_combine(op: str, parts: torch.Tensor, R: int) -> torch.Tensor:
    """The result from the segments' partials ``(outer, split, inner)`` (float32)."""
    if op in ("sum", "norm1"):
        return parts.sum(dim=1)
    if op == "mean":
        return parts.sum(dim=1) / R
    if op == "norm2":
        return parts.sum(dim=1).sqrt()
    if op in ("max", "argmax", "norm_inf"):
        return parts.amax(dim=1)
    if op in ("min", "argmin"):
        return parts.amin(dim=1)
    if op == "prod":
        return parts.prod(dim=1)
    return torch.logsumexp(parts, dim=1)
