"""Compiles every kernel of the library for an H100 (sm_90) without a GPU: ``python -m
kernels.compile_check``.

The CPU tests run the kernels in Triton's interpreter, which executes Python and accepts code the
compiler would refuse; this compiles the same kernels through Triton's real pipeline (TTIR, TTGIR,
LLVM, PTX, cubin) with representative compile-time arguments, every op of the elementwise program
and every reduction included, so that a kernel that would not build on the GPU fails here first.
It must run in a process where Triton is not in interpreter mode (``TRITON_INTERPRET`` unset).
"""

import argparse
import sys
import time

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels.batchnorm.kernel import _bn_apply_kernel, _bn_merge_kernel, _bn_stats_kernel
from kernels.cross_entropy.kernel import _ce_kernel
from kernels.elementwise.kernel import ew_chain_kernel
from kernels.elementwise.opcodes import EW_OPERAND, EW_OPS, EW_SCALAR
from kernels.layernorm.kernel import _ln_apply, _ln_rows_loop, _ln_rows_single
from kernels.reduce.kernel import RD_OPS, _rd_cols, _rd_rows
from kernels.scan.kernel import _sc_cols, _sc_rows
from kernels.softmax.kernel import _sm_cols, _sm_rows_loop, _sm_rows_single

#: Layouts: a contiguous operand of 4096 elements, a per-channel one of (8, 16, 32) (16 channels),
#: a scalar, and the padding of absent operands.
FULL = (1, 4096, 1, 1, 1, 0, 1, 1, 0, 1)
PER_CHANNEL = (1, 16, 1, 32, 1, 0, 1, 1, 0, 1)
SCALAR_LAYOUT = (0, 1, 0, 1, 1, 0, 1, 1, 0, 1)
NONE = SCALAR_LAYOUT
#: Every op of the elementwise program once: unary ops on register 0, parameterised ones with
#: scalars, binary ones with the operands and a register.
EVERY_OP = tuple(
    v
    for name, op in EW_OPS.items()
    for v in (
        (op.code, 1, 0, EW_OPERAND + 1) if op.inputs == 2 else (op.code, 0, 0, EW_SCALAR) if op.params else (op.code, 0, 0, 0)
    )
) + (EW_OPS["add"].code, 0, 0, 1)
EVERY_SCALAR = (0.5, 2.0, 1.5)
EPILOGUE = dict(
    E0=PER_CHANNEL, E1=SCALAR_LAYOUT, E2=NONE, E3=NONE, N_OPS=2, ONUMEL=4096,
    POST=(EW_OPS["mul"].code, 0, 0, EW_OPERAND, EW_OPS["add"].code, 0, 0, EW_OPERAND + 1, EW_OPS["gelu"].code, 0, 0, 0),
    POST_SCALARS=(),
)  # fmt: skip
NO_EPILOGUE = dict(E0=NONE, E1=NONE, E2=NONE, E3=NONE, N_OPS=0, ONUMEL=4096, POST=(), POST_SCALARS=())
PROLOGUE = dict(F0=FULL, F1=NONE, F2=NONE, F3=NONE, N_PRE=1, INUMEL=4096, PRE=(EW_OPS["mul"].code, 0, 0, EW_OPERAND), PRE_SCALARS=())
#: A scale, then a boolean mask's fill with -inf (attention's prologue before its softmax).
MASKED_FILL = dict(
    F0=FULL, F1=NONE, F2=NONE, F3=NONE, N_PRE=1, INUMEL=4096,
    PRE=(EW_OPS["mul"].code, 0, 0, EW_SCALAR, EW_OPS["select_nz"].code, 1, EW_OPERAND, EW_SCALAR + 1, EW_OPS["fill_nan"].code, 0, 1, 0),
    PRE_SCALARS=(0.125, float("-inf")),
)  # fmt: skip
NO_PROLOGUE = dict(F0=NONE, F1=NONE, F2=NONE, F3=NONE, N_PRE=0, INUMEL=4096, PRE=(), PRE_SCALARS=())
#: Types of runtime arguments by name (pointers default to float32 data).
TYPES = {"rows": "i32", "R": "i32", "n": "i32", "outer": "i32", "inner": "i32", "C": "i32", "eps": "fp32", "idx_ptr": "*i64", "t_ptr": "*i64"}


def cases() -> list[tuple[str, object, dict, dict, int]]:
    """(label, autotuned kernel, argument types overriding the defaults, constexprs, warps)."""
    found = [
        ("ew every op", ew_chain_kernel, {}, dict(L0=FULL, L1=PER_CHANNEL, L2=SCALAR_LAYOUT, L3=NONE, N_IN=3, NUMEL=4096, PROG=EVERY_OP, SCALARS=EVERY_SCALAR, BIG=False, BLOCK=1024), 4),
        ("ew bf16 big", ew_chain_kernel, {"out_ptr": "*bf16", "p0": "*bf16", "p1": "*i1"}, dict(L0=FULL, L1=FULL, L2=NONE, L3=NONE, N_IN=2, NUMEL=4096, PROG=(EW_OPS["mul"].code, 0, 0, 5), SCALARS=(), BIG=True, BLOCK=2048), 8),
    ]  # fmt: skip
    for log in (False, True):
        found += [
            (f"softmax rows log={log}", _sm_rows_single, {"k0": "*i1"}, dict(**MASKED_FILL, **EPILOGUE, LOG=log, BIG=False, BLOCK=1024, ROWS=4), 8),
            (f"softmax loop log={log}", _sm_rows_loop, {}, dict(**PROLOGUE, **NO_EPILOGUE, R=100000, LOG=log, BIG=True, CHUNK=4096), 8),
            (f"softmax cols log={log}", _sm_cols, {"x_ptr": "*bf16", "out_ptr": "*bf16"}, dict(**NO_PROLOGUE, **EPILOGUE, R=300, LOG=log, BIG=False, SINGLE=False, R_POW2=512, BLOCK_R=32, BLOCK_I=64), 8),
            (f"softmax cols single log={log}", _sm_cols, {}, dict(**PROLOGUE, **NO_EPILOGUE, R=12, LOG=log, BIG=False, SINGLE=True, R_POW2=16, BLOCK_R=16, BLOCK_I=64), 4),
        ]  # fmt: skip
    for rms in (False, True):
        norm = dict(RMS=rms, G=2, CPG=8, HW=64, HAS_W=True, HAS_B=not rms)
        found += [
            (f"norm rows rms={rms}", _ln_rows_single, {}, dict(**EPILOGUE, **norm, BIG=False, BLOCK=512, ROWS=4), 8),
            (f"norm loop rms={rms}", _ln_rows_loop, {"x_ptr": "*bf16", "out_ptr": "*bf16"}, dict(**NO_EPILOGUE, **norm, R=600000, BIG=True, CHUNK=4096), 8),
            (f"norm split rows rms={rms}", _ln_apply, {}, dict(**EPILOGUE, **norm, BIG=False, BLOCK=2048), 4),
        ]  # fmt: skip
    found += [
        ("batchnorm stats", _bn_stats_kernel, {}, dict(HW=4096, TOTAL=8192, PER=65536, SPLIT=1, BIG=False, CHUNK=2048), 8),
        ("batchnorm merge", _bn_merge_kernel, {}, dict(SPLIT=48, BLOCK=64), 4),
        ("batchnorm apply", _bn_apply_kernel, {}, dict(**EPILOGUE, C=16, HW=32, BIG=False, BLOCK=1024), 4),
        ("cross entropy", _ce_kernel, {"t_ptr": "*i64"}, dict(R=4096, IGNORE=-100, BIG=False, ROWS=4, CHUNK=1024), 8),
    ]  # fmt: skip
    for name, op in RD_OPS.items():
        index = name in ("argmax", "argmin")
        flags = dict(OP=op, RAW=False, WITH_VALUE=not index, WITH_INDEX=index, BIG=False)
        post = NO_EPILOGUE if index else EPILOGUE
        found += [
            (f"reduce rows {name}", _rd_rows, {}, dict(**PROLOGUE, **post, **flags, R=3000, ROWS=4, CHUNK=1024), 8),
            (f"reduce cols {name}", _rd_cols, {"x_ptr": "*bf16"}, dict(**NO_PROLOGUE, **post, **flags, R=300, BLOCK_R=32, BLOCK_I=64), 4),
        ]  # fmt: skip
    for prod in (False, True):
        for reverse in (False, True):
            flags = dict(PROD=prod, REVERSE=reverse, BIG=False)
            found += [
                (f"scan rows prod={prod} reverse={reverse}", _sc_rows, {}, dict(**PROLOGUE, **EPILOGUE, **flags, R=5000, ROWS=1, CHUNK=2048), 8),
                (f"scan cols prod={prod} reverse={reverse}", _sc_cols, {}, dict(**NO_PROLOGUE, **NO_EPILOGUE, **flags, R=300, BLOCK_R=32, BLOCK_I=64), 4),
            ]  # fmt: skip
    return found


def compile_case(kernel, types: dict, constexprs: dict, warps: int, arch: int = 90):
    """Compile ``kernel`` (a jitted function, or an autotuned one's) for ``sm_<arch>`` with these arguments."""
    fn = kernel.fn if isinstance(kernel, triton.runtime.Autotuner) else kernel
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        else:
            signature[name] = types.get(name) or TYPES.get(name) or "*fp32"
    return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="compile only the cases whose label contains this")
    args = parser.parse_args(argv)
    if triton.knobs.runtime.interpret:
        print("Triton is in interpreter mode (TRITON_INTERPRET): nothing would be compiled", file=sys.stderr)
        return 2
    failures = 0
    for label, kernel, types, constexprs, warps in cases():
        if args.only not in label:
            continue
        started = time.monotonic()
        try:
            compiled = compile_case(kernel, types, constexprs, warps)
            print(f"ok    {label} ({time.monotonic() - started:.1f}s, {len(compiled.asm['cubin'])} bytes of cubin)", flush=True)
        except Exception as exc:  # noqa: BLE001 - report every kernel that fails, not just the first
            failures += 1
            print(f"FAIL  {label}: {type(exc).__name__}: {str(exc)[:2000]}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
