"""Precision is pinned: an fp32 reference is judged at fp32 unless its workload says otherwise.

A workload may allow lower precision with a module-level literal, read from its source without
running it (``ast.literal_eval`` of the assignment): ``PRECISION = "tf32"`` (TF32 matmuls and
convolutions), ``"bf16"`` or ``"fp16"`` (computing in those types). Without it:

- the candidate process's flags (``torch.backends.cuda.matmul.allow_tf32``,
  ``torch.backends.cudnn.allow_tf32``, ``torch.get_float32_matmul_precision()``, reduced-precision
  reductions, the default dtype) must stay as the judge pinned them; the candidate's rank reports
  them after every call, before anything in its process restores them;
- independently of what the candidate's process reports, float32 outputs must agree with the
  reference's norm-wise within ``FP32_NORM_RTOL``: honest fp32 variants (another summation order,
  split-K, transposed GEMM, exp2-based softmax, one-pass variance) stay below 4e-7 of the fp64
  truth, TF32 lands at 2.9e-4 and bf16/fp16 higher (``benchmarks/results/precision_bound_cpu.md``).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import torch

from .compare import chunks

#: What ``PRECISION`` may say, from strictest to loosest.
LEVELS = ("fp32", "tf32", "fp16", "bf16")
#: ``||got - want|| / ||want||`` allowed for float32/complex64 outputs at each declared level.
NORM_RTOL = {"fp32": 5e-5, "tf32": 5e-3, "fp16": 2e-2, "bf16": 5e-2}
FP32_NORM_RTOL = NORM_RTOL["fp32"]

#: The flags a candidate's process must leave as they are when the workload is judged at fp32.
PINNED = {
    "cuda.matmul.allow_tf32": False,
    "cudnn.allow_tf32": False,
    "float32_matmul_precision": "highest",
}


class PrecisionError(ValueError):
    """The workload's ``PRECISION`` is not one the judge knows."""


def declared(workload_path: str | Path) -> str:
    """The workload's ``PRECISION`` (a string literal at module level), or ``"fp32"``."""
    tree = ast.parse(Path(workload_path).read_text(), filename=str(workload_path))
    found = "fp32"
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if not any(isinstance(t, ast.Name) and t.id == "PRECISION" for t in targets):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError):
            raise PrecisionError(f"{workload_path}: PRECISION must be a string literal, one of {', '.join(LEVELS)}") from None
        if value not in LEVELS:
            raise PrecisionError(f"{workload_path}: PRECISION = {value!r}; expected one of {', '.join(LEVELS)}")
        found = value
    return found


def pin() -> None:
    """Set the pinned flags in this process (the candidate's rank does it before loading)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


def flags() -> dict[str, object]:
    """The precision flags of this process as they are now."""
    return {
        "cuda.matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "default_dtype": str(torch.get_default_dtype()).replace("torch.", ""),
    }


def flag_problems(reported: dict | None, level: str) -> list[str]:
    """Why the flags a candidate's rank reported break the workload's precision ("" when fine)."""
    if level != "fp32":
        return []
    if not isinstance(reported, dict):
        return ["the candidate's rank reported no precision flags"]
    problems = [f"{name} = {reported.get(name)!r} (pinned to {want!r})" for name, want in PINNED.items() if reported.get(name) != want]
    if reported.get("default_dtype") not in (None, "float32"):
        problems.append(f"default dtype {reported.get('default_dtype')} (pinned to float32)")
    return problems


def norm_error(got: torch.Tensor, want: torch.Tensor, atol: float = 0.0) -> float:
    """``||got - want|| / ||want||`` over the elements ``want`` holds above ``atol``, in float64
    (complex128 for complex), chunk by chunk: float64 copies of a GiB output would take 4 GiB
    more. 0.0 where no element is above ``atol``."""
    wide = torch.complex128 if want.is_complex() else torch.float64
    scale_sq = err_sq = 0.0
    for _, g, w in chunks(got, want, wide):
        held = w.abs() > atol
        scale_sq += float(torch.linalg.vector_norm(torch.where(held, w, 0))) ** 2
        err_sq += float(torch.linalg.vector_norm(torch.where(held, g - w, 0))) ** 2
    return math.sqrt(err_sq / scale_sq) if scale_sq > 0 else 0.0


def norm_problem(got: torch.Tensor, want: torch.Tensor, level: str, label: str, atol: float = 0.0, widen: float = 1.0) -> str:
    """A float32/complex64 output whose norm-wise error exceeds the level's bound ("" when fine),
    over the elements the reference holds above ``atol`` (its dtype's absolute tolerance). Within
    ``atol`` of zero the elementwise check judges by ``atol`` alone, and a relative error says
    nothing of precision there: a mean of group-normalised values is rounding noise, and honest
    fp32 kernels differed from the reference by 100% of it (KernelBench's Conv3d + GroupNorm +
    mean: every candidate but the reference's own copy rejected at a norm-wise error of 1.0-1.3).
    ``widen``: the level's bound times this (a deep network's own float32 error: ``calibration.py``)."""
    if want.dtype not in (torch.float32, torch.complex64) or want.numel() < 2:
        return ""
    err = norm_error(got, want, atol)
    bound = NORM_RTOL[level] * max(1.0, float(widen))
    if err <= bound:
        return ""
    return (f"{label}: norm-wise error {err:.2e} exceeds {bound:.0e}, the bound for {level} "
            "(lower-precision arithmetic: TF32 or bf16/fp16, which this workload does not allow)")
