"""What projecting one timed call's outputs costs (``services/worker/evaluator/projection.py``),
per output size, beside a plain copy of the same outputs; and, on a GPU, that the device computes
the CPU's signs and projections.

    .venv/bin/python benchmarks/projection_cost.py --device cpu --max-log2 24

Prints a Markdown table: ms per call (best of five batches) for the candidate's projections (the
linear and the quadratic one, and the power sums s1 .. s4 the bounds come from, per output) and
for ``out.clone()`` (a memory-bound reference point), at sizes 2^10 .. 2^max-log2 float32
elements. The signs change with every call, so every call hashes them afresh (in registers on a
GPU; on the CPU as int64 tensors, chunk by chunk).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.worker.evaluator import projection as P  # noqa: E402
from services.worker.evaluator.compare import DEFAULT_TOLERANCE  # noqa: E402


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _per_call_ms(fn, device: torch.device, calls: int, repeats: int = 5) -> float:
    """The best of ``repeats`` batches of ``calls`` (a shared machine's busy spells only add)."""
    fn()
    _sync(device)
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        _sync(device)
        best = min(best, (time.perf_counter() - started) * 1e3 / calls)
    return best


def cost(device: torch.device, max_log2: int) -> list[str]:
    rows = ["| elements (float32) | projection ms/call | clone ms/call | ratio |", "|---|---|---|---|"]
    for log2 in range(10, max_log2 + 1, 2):
        out = torch.randn(1 << log2, device=device)
        calls = max(2, min(100, (1 << 24) >> log2))
        projector = P.Projector(12345, device)
        project_ms = _per_call_ms(lambda: projector.add([out]), device, calls)
        projector.finish()
        clone_ms = _per_call_ms(lambda: out.clone(), device, calls)
        rows.append(f"| 2^{log2} | {project_ms:.4f} | {clone_ms:.4f} | {project_ms / clone_ms:.1f}x |")
    return rows


def agree_with_cpu(device: torch.device) -> list[str]:
    """Signs and projections on ``device`` against the CPU's, for every dtype the judge meets."""
    lines = []
    signs_same = torch.equal(P.signs(7, 1, (1 << 32) - 1000, 5000, device).cpu(), P.signs(7, 1, (1 << 32) - 1000, 5000))
    lines.append(f"signs on {device} equal the CPU's: {signs_same}")
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.int32, torch.bool]
    dtypes += [getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)]
    base = torch.randn(257, 129)
    for dtype in dtypes:
        if dtype.is_complex:
            t = torch.complex(base, base.flip(0)).to(dtype)
        elif dtype == torch.bool:
            t = base > 0
        elif not dtype.is_floating_point:
            t = (base * 100).to(dtype)
        else:
            t = base.to(dtype)
        here = P.project([t.t()], 99, DEFAULT_TOLERANCE, chunk=1000)
        there = P.project([t.to(device).t()], 99, DEFAULT_TOLERANCE, chunk=1000)
        off = abs(here.p[0][0] - there.p[0][0]) / (here.total[0][0] + 1e-300)
        off2 = abs(here.p2[0][0] - there.p2[0][0]) / (here.total2[0][0] + 1e-300)
        lines.append(f"{str(dtype):>22}: p cpu {here.p[0][0]:.12g} {device} {there.p[0][0]:.12g} (off {off:.1e} of s); "
                     f"p2 cpu {here.p2[0][0]:.12g} {device} {there.p2[0][0]:.12g} (off {off2:.1e} of s2); "
                     f"bounds {here.bound[0][0]:.6g} / {there.bound[0][0]:.6g}, {here.bound2[0][0]:.6g} / {there.bound2[0][0]:.6g}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--max-log2", type=int, default=24)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        print(torch.cuda.get_device_name(device))
        print("\n".join(agree_with_cpu(device)))
        print()
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} CPU threads")
    print("\n".join(cost(device, args.max_log2)))


if __name__ == "__main__":
    main()
