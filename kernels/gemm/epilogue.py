"""Row-wise ops that a GEMM tile can finish in registers after its elementwise epilogue
(``kernels.elementwise.program.ew_epilogue``): softmax or log-softmax when the whole output row
is in the tile, and a row reduction (sum, mean, max, min, logsumexp) split over the row's tiles,
whose per-tile partials a second small kernel combines.
"""

import triton
import triton.language as tl

from kernels.elementwise.opcodes import EW_OPERAND, EW_OPS, EW_SCALAR
from kernels.elementwise.program import ew_stored

#: Ops over a whole output row, by the ``aten`` name (the row must fit one tile).
GEMM_ROW_OPS = {"softmax": 1, "log_softmax": 2}
#: Reductions over the output row: each row becomes one value.
GEMM_REDUCTIONS = {"sum": 1, "mean": 2, "max": 3, "min": 4, "logsumexp": 5}


@triton.jit
def gemm_row_op(x, col_ok, ROW: tl.constexpr):
    """Softmax (``ROW`` 1) or log-softmax (2) along the tile's rows; columns outside the output
    do not count and come out 0."""
    x = tl.where(col_ok[None, :], x, float("-inf"))
    m = tl.max(x, axis=1)
    e = tl.where(col_ok[None, :], tl.exp(x - m[:, None]), 0.0)
    s = tl.sum(e, axis=1)
    if ROW == 1:
        x = e / s[:, None]
    else:
        x = x - m[:, None] - tl.log(s)[:, None]
    return tl.where(col_ok[None, :], x, 0.0)


@triton.jit
def gemm_partial_reduce(x, col_ok, REDUCE: tl.constexpr):
    """The tile's part of a row reduction: (value, sum of exp(x - value) for logsumexp)."""
    if REDUCE == 1 or REDUCE == 2:
        v = tl.sum(tl.where(col_ok[None, :], x, 0.0), axis=1)
        s = v
    elif REDUCE == 3:
        v = tl.max(tl.where(col_ok[None, :], x, float("-inf")), axis=1)
        s = v
    elif REDUCE == 4:
        v = tl.min(tl.where(col_ok[None, :], x, float("inf")), axis=1)
        s = v
    else:
        xm = tl.where(col_ok[None, :], x, float("-inf"))
        v = tl.max(xm, axis=1)
        safe = tl.where(v == float("-inf"), 0.0, v)
        s = tl.sum(tl.where(col_ok[None, :], tl.exp(xm - safe[:, None]), 0.0), axis=1)
    return v, s


@triton.jit
def gemm_finish_rows_kernel(v_ptr, s_ptr, out_ptr, R, T, N, REDUCE: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr):
    """Combine the partials (``[row, tile]``, ``T`` tiles) of ``R`` row reductions over ``N``
    columns into one value per row."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    row_ok = rows < R
    t = tl.arange(0, BLOCK_T)
    m2 = row_ok[:, None] & (t[None, :] < T)
    offs = rows.to(tl.int64)[:, None] * T + t[None, :]
    if REDUCE == 1 or REDUCE == 2:
        y = tl.sum(tl.load(v_ptr + offs, mask=m2, other=0.0), axis=1)
        if REDUCE == 2:
            y = y / N
    elif REDUCE == 3:
        y = tl.max(tl.load(v_ptr + offs, mask=m2, other=float("-inf")), axis=1)
    elif REDUCE == 4:
        y = tl.min(tl.load(v_ptr + offs, mask=m2, other=float("inf")), axis=1)
    else:
        v = tl.load(v_ptr + offs, mask=m2, other=float("-inf"))
        s = tl.load(s_ptr + offs, mask=m2, other=0.0)
        m = tl.max(v, axis=1)
        safe = tl.where(m == float("-inf"), 0.0, m)
        total = tl.sum(tl.where(m2, s * tl.exp(v - safe[:, None]), 0.0), axis=1)
        y = safe + tl.log(tl.where(row_ok, total, 1.0))
    tl.store(out_ptr + rows, ew_stored(y, out_ptr.dtype.element_ty), mask=row_ok)


def gemm_finish_rows(v, s, out, n_cols: int, reduce: str) -> None:
    """Reduce the float32 partials ``v``/``s`` (``[rows, tiles]``) of a row reduction over
    ``n_cols`` columns into the contiguous ``out`` (one value per row)."""
    rows, tiles = v.shape
    block_t = triton.next_power_of_2(tiles)
    block_r = max(1, min(64, 4096 // block_t))
    gemm_finish_rows_kernel[(triton.cdiv(rows, block_r),)](
        v, s, out, rows, tiles, n_cols, REDUCE=GEMM_REDUCTIONS[reduce], BLOCK_R=block_r, BLOCK_T=block_t
    )


def gemm_chain(*steps) -> tuple[tuple, tuple]:
    """``(program, scalars)`` of a hand-written chain of elementwise ops applied one after the
    other to the kernel's result (``kernels/elementwise/opcodes.py`` names), for callers that
    write an epilogue by hand. A step is an op name (a unary op), or ``(name, arg)`` where
    ``arg`` is ``("operand", k)`` (the k-th operand tensor), a float (a scalar on the right:
    ``x - 2.0``), ``("left", float)`` (a scalar on the left: ``2.0 - x``), or a tuple of floats
    (the parameters of ``leaky_relu``, ``softplus``, ``elu``, ``hardtanh``).

    ``gemm_chain(("add", ("operand", 0)), "gelu", ("mul", 0.5))`` is ``gelu(x + bias) * 0.5``."""
    program: list[int] = []
    scalars: list[float] = []
    for step in steps:
        name, arg = (step, None) if isinstance(step, str) else step
        if name not in EW_OPS:
            raise ValueError(f"unknown elementwise op {name!r}")
        op = EW_OPS[name]
        tagged = isinstance(arg, tuple) and len(arg) == 2 and arg[0] in ("operand", "left")
        a, b = 0, 0
        if op.params:
            if not isinstance(arg, tuple) or tagged or len(arg) != op.params:
                raise ValueError(f"elementwise op {name!r} takes {op.params} parameter(s), got {arg!r}")
            b = EW_SCALAR + len(scalars)
            scalars.extend(float(v) for v in arg)
        elif op.inputs == 2:
            if arg is None or (isinstance(arg, tuple) and not tagged):
                raise ValueError(f"elementwise op {name!r} needs an operand or a scalar, got {arg!r}")
            if tagged and arg[0] == "operand":
                b = EW_OPERAND + int(arg[1])
            else:
                a, b = (EW_SCALAR + len(scalars), 0) if tagged else (0, EW_SCALAR + len(scalars))
                scalars.append(float(arg[1] if tagged else arg))
        elif arg is not None:
            raise ValueError(f"elementwise op {name!r} reads only the value, got {arg!r}")
        program += [op.code, 0, a, b]
    return tuple(program), tuple(scalars)
