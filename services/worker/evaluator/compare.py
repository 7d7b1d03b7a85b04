"""The judge: compares one rank's candidate outputs with the reference's, in the pool process.

Tolerances follow ``torch.testing``: ``|a - b| <= atol + rtol * |b|`` elementwise, per dtype,
overridable by the workload's ``TOLERANCE`` and the settings. NaN and Inf never pass; shapes,
dtypes and output structure must match exactly; integer and boolean outputs must be equal.
"""

from __future__ import annotations

from typing import Any

import torch

from kloom.evaluation import OutputCheck

#: (atol, rtol) by dtype. Reductions across ranks reorder floating-point sums, so the float32
#: tolerance is looser than torch.testing's default; low-precision types follow torch.testing.
DEFAULT_TOLERANCE: dict[torch.dtype, tuple[float, float]] = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
    torch.complex64: (1e-4, 1e-4),
    torch.complex128: (1e-7, 1e-7),
}
if hasattr(torch, "float8_e4m3fn"):
    DEFAULT_TOLERANCE[torch.float8_e4m3fn] = (1e-1, 1.25e-1)
    DEFAULT_TOLERANCE[torch.float8_e5m2] = (1e-1, 2.5e-1)


def dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def resolve_tolerance(workload_tol: Any, overrides: dict[str, tuple[float, float]]) -> dict[torch.dtype, tuple[float, float]]:
    """Defaults, then the workload's ``TOLERANCE`` ({dtype: (atol, rtol) or {"atol", "rtol"}}), then settings."""
    table = dict(DEFAULT_TOLERANCE)
    for key, value in dict(workload_tol or {}).items():
        dtype = key if isinstance(key, torch.dtype) else dtype_from_name(str(key))
        if isinstance(value, dict):
            value = (float(value.get("atol", table.get(dtype, (0, 0))[0])), float(value.get("rtol", table.get(dtype, (0, 0))[1])))
        table[dtype] = (float(value[0]), float(value[1]))
    for name, value in overrides.items():
        table[dtype_from_name(name)] = (float(value[0]), float(value[1]))
    return table


def compare_leaf(got: Any, want: Any, tol: dict[torch.dtype, tuple[float, float]], label: str) -> tuple[bool, dict]:
    """Compare one output leaf; returns (ok, details)."""
    if not isinstance(want, torch.Tensor):
        if isinstance(got, torch.Tensor):
            return False, {"message": f"{label}: expected a {type(want).__name__}, got a tensor"}
        if isinstance(want, float) and isinstance(got, (int, float)):
            atol, rtol = tol[torch.float64]
            ok = abs(got - want) <= atol + rtol * abs(want)
            return ok, {"message": "" if ok else f"{label}: {got!r} != {want!r}"}
        ok = got == want
        return ok, {"message": "" if ok else f"{label}: {got!r} != {want!r}"}
    if not isinstance(got, torch.Tensor):
        return False, {"message": f"{label}: expected a tensor, got {type(got).__name__}"}
    if got.shape != want.shape:
        return False, {"message": f"{label}: shape {tuple(got.shape)} != expected {tuple(want.shape)}"}
    if got.dtype != want.dtype:
        return False, {"message": f"{label}: dtype {got.dtype} != expected {want.dtype}"}
    numel = want.numel()
    if numel == 0:
        return True, {"numel": 0}
    if not (want.is_floating_point() or want.is_complex()):
        return _compare_exact(got, want, label)
    atol, rtol = tol.get(want.dtype, (1e-5, 1.3e-6))
    # float32 holds every bf16/fp16 value exactly; float64 only where the data is float64.
    if want.is_complex():
        wide = torch.complex128 if want.dtype == torch.complex128 else torch.complex64
    else:
        wide = torch.float64 if want.dtype == torch.float64 else torch.float32
    seen = _Mismatches()
    max_abs = max_rel = 0.0
    for start, g, w in chunks(got, want, wide):
        diff = (g - w).abs()
        finite = torch.isfinite(g) if not g.is_complex() else torch.isfinite(g.real) & torch.isfinite(g.imag)
        bad = ~(diff <= atol + rtol * w.abs()) | ~finite
        seen.add(start, bad, g, w, nonfinite=~finite)
        safe_diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, float("inf")))
        max_abs = max(max_abs, float(safe_diff.max()))
        max_rel = max(max_rel, float((safe_diff / w.abs().clamp_min(1e-12)).max()))
        del diff, finite, bad, safe_diff
    details = {"numel": numel, "mismatched": seen.count, "max_abs_diff": max_abs, "max_rel_diff": max_rel}
    if seen.count:
        what = f"{seen.nonfinite} NaN/Inf, " if seen.nonfinite else ""
        details["message"] = (
            f"{label}: {seen.count} of {numel} elements outside atol={atol:g}, rtol={rtol:g} "
            f"({what}max abs diff {max_abs:.3g}, max rel diff {max_rel:.3g}; first at index {seen.index(want.shape)}: "
            f"got {seen.got:.6g}, expected {seen.want:.6g})"
        )
    return seen.count == 0, details


#: Elements compared at a time: the comparison's temporaries stay a few of these wide, whatever
#: the outputs' size (a GiB output compared whole took several GiB of the device more).
CHUNK = 1 << 22


def chunks(got: torch.Tensor, want: torch.Tensor, wide: torch.dtype | None = None):
    """(flat offset, got's chunk, want's chunk) over both tensors in flat order, each chunk
    converted to ``wide`` where given."""
    g_flat, w_flat = got.reshape(-1), want.reshape(-1)
    for start in range(0, w_flat.numel(), CHUNK):
        g, w = g_flat[start : start + CHUNK], w_flat[start : start + CHUNK]
        yield start, (g.to(wide) if wide is not None else g), (w.to(wide) if wide is not None else w)


class _Mismatches:
    """The count of elements out of bounds over the chunks, and the first one."""

    def __init__(self):
        self.count = self.nonfinite = 0
        self.first: int | None = None
        self.got = self.want = None

    def add(self, start: int, bad: torch.Tensor, g: torch.Tensor, w: torch.Tensor, nonfinite: torch.Tensor | None = None) -> None:
        found = int(bad.sum())
        if not found:
            return
        self.count += found
        if nonfinite is not None:
            self.nonfinite += int(nonfinite.sum())
        if self.first is None:
            at = int(torch.nonzero(bad)[0])
            self.first, self.got, self.want = start + at, g[at].item(), w[at].item()

    def index(self, shape: torch.Size) -> tuple[int, ...]:
        flat, out = self.first or 0, []
        for size in reversed(shape):
            out.append(flat % size)
            flat //= size
        return tuple(reversed(out))


def _compare_exact(got: torch.Tensor, want: torch.Tensor, label: str) -> tuple[bool, dict]:
    """Integer and boolean outputs: every element equal."""
    seen = _Mismatches()
    max_abs = 0.0
    for start, g, w in chunks(got, want):
        bad = g != w
        seen.add(start, bad, g, w)
        if seen.count:
            diff = (g.to(torch.int64) - w.to(torch.int64)).abs() if w.dtype != torch.bool else bad.to(torch.int64)
            max_abs = max(max_abs, float(diff.max()))
    numel = want.numel()
    details = {"numel": numel, "mismatched": seen.count}
    if seen.count:
        details["max_abs_diff"] = max_abs
        details["message"] = f"{label}: {seen.count} of {numel} elements differ (exact match required for {want.dtype})"
    return seen.count == 0, details


def compare_outputs(
    got_outputs: list[Any],
    got_mutated: dict[int, Any],
    want_outputs: list[Any],
    want_mutated: dict[int, Any],
    tol: dict[torch.dtype, tuple[float, float]],
) -> tuple[dict[str, float], list[str]]:
    """Compare output leaves and in-place-modified inputs, wherever the tensors live (the rank's
    device for large outputs, this process's CPU for small ones). Returns totals and problems."""
    totals = {"numel": 0, "mismatched": 0, "max_abs_diff": 0.0, "max_rel_diff": 0.0}
    problems: list[str] = []
    pairs = [(f"output {i}", g, w) for i, (g, w) in enumerate(zip(got_outputs, want_outputs))]
    pairs += [(f"input {i} after the call", got_mutated.get(i), w) for i, w in sorted(want_mutated.items())]
    for label, g, w in pairs:
        ok, details = compare_leaf(g, w, tol, label)
        totals["numel"] += details.get("numel", 0)
        totals["mismatched"] += details.get("mismatched", 0)
        totals["max_abs_diff"] = max(totals["max_abs_diff"], details.get("max_abs_diff", 0.0))
        totals["max_rel_diff"] = max(totals["max_rel_diff"], details.get("max_rel_diff", 0.0))
        if not ok:
            problems.append(details["message"])
    return totals, problems


def compare_rank(
    rank: int,
    got: dict[str, Any],
    want: dict[str, Any],
    tol: dict[torch.dtype, tuple[float, float]],
) -> OutputCheck:
    """Judge a rank's trial reply (``got``) against the reference's (``want``).

    Small outputs arrive whole and are compared here; large ones were compared on the rank's
    device against reference outputs it computed before any candidate code was imported, and
    arrive as the totals and problems of that comparison (``got["check"]``)."""
    check = OutputCheck(rank=rank, ok=True)
    problems: list[str] = []
    if got["spec"] != want["spec"]:
        problems.append(f"output structure {got['spec']} != expected {want['spec']}")
    elif "check" in got:
        totals, found = got["check"]["totals"], got["check"]["problems"]
        problems.extend(found)
    else:
        totals, found = compare_outputs(got["outputs"], got["mutated"], want["outputs"], want["mutated"], tol)
        problems.extend(found)
    if got["spec"] == want["spec"]:
        check.numel = int(totals["numel"])
        check.mismatched = int(totals["mismatched"])
        check.max_abs_diff = float(totals["max_abs_diff"])
        check.max_rel_diff = float(totals["max_rel_diff"])
    if got.get("late_writes"):
        which = ", ".join(map(str, got["late_writes"]))
        problems.append(
            f"output(s) {which} changed after the call returned: work still pending on another stream "
            "or thread when the result was handed back"
        )
    if got.get("unexpected_mutation"):
        which = ", ".join(map(str, got["unexpected_mutation"]))
        problems.append(f"modified input(s) {which}, which the reference leaves unchanged")
    if problems:
        check.ok = False
        check.message = f"rank {rank}: " + "; ".join(problems)
    return check


def tolerance_to_names(tol: dict[torch.dtype, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    return {str(k).replace("torch.", ""): v for k, v in tol.items()}


def tolerance_from_names(names: dict[str, tuple[float, float]]) -> dict[torch.dtype, tuple[float, float]]:
    return {dtype_from_name(k): (float(v[0]), float(v[1])) for k, v in names.items()}
