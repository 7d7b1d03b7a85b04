"""Every launched comm kernel takes its per-call arguments (the flag epoch, the double buffer's
half) unspecialised: Triton would otherwise compile a new variant when the epoch reaches 16 (a
multiple of 16), in whatever call that is, a timed one included. Read from the source (without a
GPU the tests run Triton's interpreter, whose functions keep no specialisation)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kernels.comm
from kernels.comm.signal import PER_CALL

FOLDER = Path(kernels.comm.__file__).parent


def _jit_call(fn: ast.FunctionDef) -> ast.expr | None:
    for deco in fn.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if ast.unparse(target) == "triton.jit":
            return deco
    return None


def _launched_kernels() -> dict[str, tuple[ast.FunctionDef, ast.expr]]:
    found = {}
    for path in sorted(FOLDER.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel") and _jit_call(node) is not None:
                found[f"{path.stem}.{node.name}"] = (node, _jit_call(node))
    return found


KERNELS = _launched_kernels()


def test_the_launched_kernels_are_found():
    assert {"allreduce_norm._ar_norm_kernel", "ag_gemm._ag_gemm_kernel", "gemm_rs._gemm_rs_kernel", "moe._combine_kernel", "signal._wait_kernel"} <= set(KERNELS)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_per_call_arguments_are_not_specialised(name):
    fn, deco = KERNELS[name]
    args = {a.arg for a in fn.args.args}
    assert "epoch" in args, f"{name} takes no epoch"
    declared = {ast.unparse(k.value) for k in getattr(deco, "keywords", []) if k.arg == "do_not_specialize"}
    assert declared == {"PER_CALL"}, f"{name}: @triton.jit without do_not_specialize=PER_CALL"
    assert set(PER_CALL) >= {"epoch", "parity_offset"}
