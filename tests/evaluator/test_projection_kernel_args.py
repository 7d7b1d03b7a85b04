"""The judge's GPU projection kernel compiles once per dtype, before anything is timed.

Its per-call integer arguments (the piece's length, where its indices start, the hash key drawn
from each block's seed) were specialised by Triton (a value divisible by 16 or equal to 1 gets a
kernel of its own): a key that happened to be a multiple of 16 compiled a new kernel inside a
timed block, 300-700 ms at once on both sides, and the clock cross-check rejected correct
candidates on the noise (benchmarks/gpu/clock_case.py on 2xH200). Keys from 2**31 up compiled an
int64 variant likewise, until they were passed as int32 of the same bits. Read from the source:
without a GPU the suite runs Triton's interpreter, whose functions keep no specialisation."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from services.worker.evaluator import projection_kernel
from services.worker.evaluator.projection import KERNEL_MIN_BYTES, kernel_dtypes

#: Per kernel, the integer arguments that change from call to call, or from leaf to leaf (the
#: memory-order kernel's sizes and strides: a candidate's layout is known only at its first timed
#: call, so a variant of their own would compile inside a timed block).
PER_CALL = {
    "_project_kernel": {"n", "low_start", "key"},
    "_project_dense_kernel": {"n", "key", "s1", "s2", "s3", "l0", "l1", "l2", "l3"},
}


def _kernel(name: str) -> ast.FunctionDef:
    tree = ast.parse(Path(projection_kernel.__file__).read_text())
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("name", sorted(PER_CALL))
def test_the_per_call_arguments_are_not_specialised(name):
    fn = _kernel(name)
    per_call = PER_CALL[name]
    assert per_call <= {a.arg for a in fn.args.args}
    declared: set[str] = set()
    for deco in fn.decorator_list:
        if isinstance(deco, ast.Call) and ast.unparse(deco.func) == "triton.jit":
            for kw in deco.keywords:
                if kw.arg == "do_not_specialize":
                    declared |= {elt.value for elt in kw.value.elts}
    assert declared >= per_call, f"@triton.jit of {name} leaves {per_call - declared} specialised"


def test_the_key_and_start_are_passed_as_int32_of_the_same_bits():
    to32 = projection_kernel._int32
    for value in (0, 1, (1 << 31) - 1, 1 << 31, (1 << 32) - 1):
        signed = to32(value)
        assert -(1 << 31) <= signed < 1 << 31 and signed & 0xFFFFFFFF == value


def test_the_kernel_is_compiled_for_the_dtypes_of_the_outputs_that_will_use_it():
    """Before timing, for each dtype of an output leaf big enough for the kernel (complex ones
    read as their real parts); none for small outputs (staged and projected by tensor operations,
    so a new candidate process does not load the kernel at all: 0.5 s on an H200)."""
    big = KERNEL_MIN_BYTES
    assert kernel_dtypes([(big, "torch.float32"), (big, "torch.bfloat16"), (big - 1, "torch.float16")]) == {torch.float32, torch.bfloat16}
    assert kernel_dtypes([(4 * big, "torch.complex64"), (big, "torch.bool")]) == {torch.float32, torch.bool}
    assert kernel_dtypes([(1024, "torch.float32")]) == set()
    assert kernel_dtypes([]) == set()
