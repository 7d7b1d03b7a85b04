"""One kernel for a chain of elementwise ops: every input read once, the result written once.

``ew_chain(inputs, program, scalars, shape, dtype)`` computes ``program`` (``opcodes.py``) over
the broadcast of up to four inputs to ``shape`` (any strides; per-channel, per-row and scalar
tensors are read through their broadcast layout, not expanded), in float32, and writes a new
contiguous tensor of ``dtype``. Tile size and warps are autotuned per size on the GPU.
"""

import math

import torch
import triton
import triton.language as tl

from kernels.elementwise.opcodes import EW_MAX_OPERANDS
from kernels.elementwise.program import ew_load, ew_run, ew_stored

#: Dtypes the chain reads and writes (computation is float32).
EW_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
EW_READ_DTYPES = EW_DTYPES + (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


class KernelUnsupported(ValueError):
    """The kernel does not cover these arguments; the caller must compute them another way."""


def ew_bench(kernel_call, quantiles):
    """The autotuner's timer: CUDA events on a GPU; under the CPU interpreter nothing is timed
    and the first config that fits is used."""
    if not torch.cuda.is_available():
        return [0.0, 0.0, 0.0]
    return triton.testing.do_bench(kernel_call, quantiles=quantiles)


def layout_of(t: torch.Tensor, shape: tuple) -> tuple | None:
    """The operand layout (``program.py``) of ``t`` broadcast to the contiguous ``shape``, or
    None when it needs more than three index groups."""
    view = t.expand(shape)
    div = 1
    groups = []  # (size, stride, div), innermost first
    for size, stride in reversed([(s, st) for s, st in zip(view.shape, view.stride()) if s != 1]):
        if groups and stride == groups[-1][1] * groups[-1][0]:
            groups[-1] = (groups[-1][0] * size, groups[-1][1], groups[-1][2])
        else:
            groups.append((size, stride, div))
        div *= size
    groups = [g for g in groups if g[1] != 0]
    if len(groups) > 3:
        return None
    flat = [len(groups)]
    for size, stride, d in groups + [(1, 0, 1)] * (3 - len(groups)):
        flat += [size, stride, d]
    return tuple(flat)


def ew_extent(t: torch.Tensor) -> int:
    """One past the largest element offset ``t`` reads from its data pointer's storage start."""
    return t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1


def ew_configs():
    return [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((1024, 4), (2048, 8), (4096, 8))]


#: Elements of a tile held in registers by the row kernels that read a row once.
EW_TILE_MAX = 16384


def ew_row_tile_configs():
    """Autotuning space of kernels that hold ``ROWS`` whole rows of ``BLOCK`` elements."""
    return [triton.Config({"ROWS": r}, num_warps=w) for r, w in ((1, 4), (1, 8), (1, 16), (4, 8))]


def ew_row_tile_prune(configs, named_args, **kwargs):
    """The row-tile configurations that fit the launch's ``BLOCK`` and row count."""
    block = kwargs["BLOCK"]
    fit = [c for c in configs if c.kwargs["ROWS"] * block <= EW_TILE_MAX and c.kwargs["ROWS"] <= max(named_args["rows"], 1)]
    fit = [c for c in fit if c.num_warps * 32 <= max(c.kwargs["ROWS"] * block // 4, 64)]
    return fit or configs[:1]


@triton.autotune(configs=ew_configs(), key=["n"], do_bench=ew_bench)
@triton.jit
def ew_chain_kernel(
    out_ptr, p0, p1, p2, p3, n,
    L0: tl.constexpr, L1: tl.constexpr, L2: tl.constexpr, L3: tl.constexpr,
    N_IN: tl.constexpr, NUMEL: tl.constexpr, PROG: tl.constexpr, SCALARS: tl.constexpr,
    BIG: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if BIG:
        idx = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    else:
        idx = pid * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    a0 = ew_load(p0, idx, mask, L0, NUMEL, tl.float32)
    a1 = a0
    a2 = a0
    a3 = a0
    if N_IN > 1:
        a1 = ew_load(p1, idx, mask, L1, NUMEL, tl.float32)
    if N_IN > 2:
        a2 = ew_load(p2, idx, mask, L2, NUMEL, tl.float32)
    if N_IN > 3:
        a3 = ew_load(p3, idx, mask, L3, NUMEL, tl.float32)
    y = ew_run(a0, a0, a1, a2, a3, PROG, SCALARS)
    tl.store(out_ptr + idx, ew_stored(y, out_ptr.dtype.element_ty), mask=mask)


def ew_operands(inputs: list, shape: tuple) -> tuple[list, list]:
    """The inputs as kernel operands (materialised where their layout has too many groups) and
    their layouts, padded to ``EW_MAX_OPERANDS`` (absent operands repeat the first)."""
    tensors, layouts = [], []
    for t in inputs:
        layout = layout_of(t, shape)
        if layout is None:
            t = t.expand(shape).contiguous()
            layout = layout_of(t, shape)
        tensors.append(t)
        layouts.append(layout)
    pad = EW_MAX_OPERANDS - len(tensors)
    return tensors + [tensors[0]] * pad, layouts + [layouts[0]] * pad


def ew_epilogue_args(post, shape: tuple, dummy: torch.Tensor, prefix: str = "post") -> dict:
    """Keyword arguments of a kernel's epilogue (``ew_epilogue``) for ``post``: None, or
    ``(operands, program, scalars)`` with the operands broadcast to the result's ``shape``.
    ``prefix="pre"`` names the arguments of a kernel's prologue instead (applied to the values it
    loads, with operands broadcast to its input's shape)."""
    operands, program, scalars = post if post is not None else ((), (), ())
    if len(operands) > EW_MAX_OPERANDS:
        raise KernelUnsupported(f"an epilogue reads at most {EW_MAX_OPERANDS} tensors")
    for t in operands:
        if t.device != dummy.device or t.dtype not in EW_READ_DTYPES or not ew_broadcasts(t.shape, shape):
            raise KernelUnsupported(f"an epilogue operand of shape {list(t.shape)} does not fit a {list(shape)} result")
    tensors, layouts = ew_operands(list(operands), shape) if operands else ([dummy] * EW_MAX_OPERANDS, [(0,) + (1, 0, 1) * 3] * EW_MAX_OPERANDS)
    pointer, layout, names = ("q", "E", ("N_OPS", "ONUMEL", "POST", "POST_SCALARS")) if prefix == "post" else ("k", "F", ("N_PRE", "INUMEL", "PRE", "PRE_SCALARS"))
    return {
        **{f"{pointer}{k}": t for k, t in enumerate(tensors)},
        **{f"{layout}{k}": lay for k, lay in enumerate(layouts)},
        names[0]: len(operands),
        names[1]: math.prod(shape),
        names[2]: tuple(program),
        names[3]: tuple(float(s) for s in scalars),
    }


def ew_broadcasts(shape, target) -> bool:
    """Whether a tensor of ``shape`` broadcasts to exactly ``target``."""
    shape, target = tuple(shape), tuple(target)
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape, target[len(target) - len(shape) :]))


def ew_check(inputs: list, shape: tuple, dtype: torch.dtype) -> None:
    """Raise ``KernelUnsupported`` unless the chain kernels can read ``inputs`` and write ``dtype``."""
    if not 1 <= len(inputs) <= EW_MAX_OPERANDS:
        raise KernelUnsupported(f"a chain reads 1 to {EW_MAX_OPERANDS} tensors, not {len(inputs)}")
    if dtype not in EW_DTYPES:
        raise KernelUnsupported(f"the chain cannot write {dtype}")
    device = inputs[0].device
    for t in inputs:
        if not isinstance(t, torch.Tensor) or t.device != device or t.dtype not in EW_READ_DTYPES:
            raise KernelUnsupported("chain inputs must be tensors of one device and a real dtype")
        if not ew_broadcasts(t.shape, shape):
            raise KernelUnsupported(f"an input of shape {list(t.shape)} does not broadcast to {list(shape)}")


def ew_chain(inputs: list, program: tuple, scalars: tuple, shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """``program`` over ``inputs`` broadcast to ``shape``, as a new contiguous ``dtype`` tensor."""
    shape = tuple(int(s) for s in shape)
    ew_check(inputs, shape, dtype)
    out = torch.empty(shape, dtype=dtype, device=inputs[0].device)
    n = out.numel()
    if n == 0:
        return out
    tensors, layouts = ew_operands(inputs, shape)
    big = max(n, *(ew_extent(t) for t in tensors)) >= 2**31 - 8192
    ew_chain_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](
        out, *tensors, n, *layouts,
        N_IN=len(inputs), NUMEL=n, PROG=tuple(program), SCALARS=tuple(float(s) for s in scalars), BIG=big,
    )  # fmt: skip
    return out

