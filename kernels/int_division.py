"""Checks of signed integer division for kernel tests: which divisions and remainders a kernel
computes under the Triton interpreter, so a test can assert that none divides a negative value;
and how ``//`` and ``%`` round where a kernel runs (``divide_by``), interpreter or GPU.

Signed ``//`` and ``%`` round toward zero in compiled Triton (LLVM's ``sdiv``/``srem``) and the
interpreter copies that, but numpy and Python floor: code that divides a possibly negative index
and relies on a mask to discard the lane reads differently to anyone who knows Python, and one
forgotten mask turns into wrong addresses only on some inputs. Kernels here clamp before they
divide; ``signed_divisions`` lets their tests prove it on shapes that produce negative indices.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import numpy as np
import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpreterBuilder

#: Dividends of ``divide_by``, and the quotients and remainders by 2 of C (rounding toward zero),
#: which compiled Triton and its interpreter follow (Python's floor would give -4, -3, -1, ...).
DIVIDENDS = (-7, -6, -1, 0, 5, 7, -8, 8)
C_BY_TWO = ([-3, -3, 0, 0, 2, 3, -4, 4], [-1, 0, -1, 0, 1, 1, 0, 0])


@dataclass
class Divisions:
    """The divisions seen: how many, and the smallest dividend and divisor of each operator."""

    count: int = 0
    smallest: dict[str, int] = field(default_factory=dict)

    def negative(self) -> dict[str, int]:
        """The operators that saw a negative dividend or divisor, with the smallest one."""
        return {op: v for op, v in self.smallest.items() if v < 0}


@contextlib.contextmanager
def signed_divisions():
    """Record every signed integer ``//`` and ``%`` the interpreter runs inside the block (every
    lane, masked or not: a masked lane still computes its address)."""
    seen = Divisions()
    originals = {name: getattr(InterpreterBuilder, name) for name in ("create_sdiv", "create_srem")}

    def recording(name, original):
        def op(self, lhs, rhs):
            seen.count += 1
            for role, handle in (("dividend", lhs), ("divisor", rhs)):
                low = int(np.min(handle.data)) if np.size(handle.data) else 0
                key = f"{name[len('create_'):]} {role}"
                seen.smallest[key] = min(seen.smallest.get(key, low), low)
            return original(self, lhs, rhs)

        return op

    for name, original in originals.items():
        setattr(InterpreterBuilder, name, recording(name, original))
    try:
        yield seen
    finally:
        for name, original in originals.items():
            setattr(InterpreterBuilder, name, original)


@triton.jit
def _divide(x_ptr, q_ptr, r_ptr, d, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.store(q_ptr + i, x // d)
    tl.store(r_ptr + i, x % d)


def divide_by(values, divisor: int, device: str) -> tuple[list[int], list[int]]:
    """``values // divisor`` and ``values % divisor`` computed by a Triton kernel on ``device``."""
    x = torch.tensor(values, dtype=torch.int32, device=device)
    q, r = torch.empty_like(x), torch.empty_like(x)
    _divide[(1,)](x, q, r, divisor, BLOCK=len(values))
    return q.tolist(), r.tolist()
