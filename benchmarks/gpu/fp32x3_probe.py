"""Float32 products on the tensor cores as three TF32 products ("tf32x3"), against cuBLAS's and
cuDNN's full float32, on one GPU: time and error, side by side in one run.

For each product shape (and each convolution) it times, with ``triton.testing.do_bench`` (L2
flushed, median): the library's float32 (TF32 off: what an fp32 reference runs), the library with
TF32 on (what the judge rejects, for scale), kloom's kernel in full float32 (``"ieee"``) and in
``"tf32x3"``; for convolutions also the tap-outer kernel (``kernels/conv/tap_gemm.py``), with the
input as it comes and made channels-last. Each result's error is the judge's measure, ``||got - truth|| / ||truth||``, against
the float64 product of the same inputs, next to the library float32's own error and the judge's
bound (``services/worker/evaluator/precision.py``: ``FP32_NORM_RTOL``).

    python benchmarks/gpu/fp32x3_probe.py --out "$OUT" [--only gemm|conv] [--budget-s 400]

Writes ``fp32x3_probe.json`` and ``.md`` under ``--out`` after every case.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.conv.implicit_gemm import conv_forward  # noqa: E402
from kernels.conv.tap_gemm import conv_taps  # noqa: E402
from kernels.gemm.matmul import gemm, gemm_tuned_configs  # noqa: E402
from services.worker.evaluator.precision import FP32_NORM_RTOL  # noqa: E402


def bench_ms(fn) -> float:
    return float(triton.testing.do_bench(fn, warmup=10, rep=80, return_mode="median"))


def norm_error(got: torch.Tensor, truth: torch.Tensor) -> float:
    got = got.double()
    return float(torch.linalg.vector_norm(got - truth) / torch.linalg.vector_norm(truth))


def tf32(on: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def gemm_cases():
    """(name, A, B, flops) with B possibly a transposed view, as the workloads hold them."""
    dev = "cuda"
    x, w = torch.rand(1024, 8192, device=dev), torch.rand(8192, 8192, device=dev) - 0.5
    yield "linear 1024x8192 @ (8192x8192)^T", x, w.t()
    a, b = torch.rand(4096, 4096, device=dev), torch.rand(4096, 4096, device=dev)
    yield "square 4096^3", a, b
    a, b = torch.rand(2048, 8192, device=dev), torch.rand(4096, 8192, device=dev)
    yield "2048x8192 @ (4096x8192)^T", a, b.t()
    a, b = torch.rand(128, 512, 1024, device=dev), torch.rand(128, 1024, 2048, device=dev)
    yield "bmm 128 x 512x1024 @ 1024x2048", a, b
    a, b = torch.rand(8 * 256 * 512, 256, device=dev), torch.rand(256, 768, device=dev)
    yield "1048576x256 @ 256x768", a, b
    a, b = torch.randn(1024, 8192, device=dev), torch.randn(8192, 1024, device=dev)
    yield "randn 1024x8192 @ 8192x1024", a, b


def conv_cases():
    """(name, x, weight, bias, padding)."""
    dev = "cuda"
    yield "conv2d 128x64x128x128, 128 out, 3x3", torch.rand(128, 64, 128, 128, device=dev), torch.rand(128, 64, 3, 3, device=dev) - 0.5, torch.rand(128, device=dev), 0
    yield "conv2d 8x64x512x1024, 128 out, 3x3", torch.rand(8, 64, 512, 1024, device=dev), torch.rand(128, 64, 3, 3, device=dev) - 0.5, None, 0
    yield "conv2d 16x16x1024x1024, 128 out, 3x3", torch.rand(16, 16, 1024, 1024, device=dev), torch.rand(128, 16, 3, 3, device=dev) - 0.5, None, 0
    yield "conv3d 16x32x32x64x64, 64 out, 3^3", torch.rand(16, 32, 32, 64, 64, device=dev), torch.rand(64, 32, 3, 3, 3, device=dev) - 0.5, torch.rand(64, device=dev), 0


def gemm_row(name, a, b) -> dict:
    truth = (a.double() @ b.double())
    row = {"case": name, "kind": "gemm"}
    tf32(False)
    lib = lambda: a @ b  # noqa: E731
    row["lib_fp32_error"] = norm_error(lib(), truth)
    row["lib_fp32_ms"] = bench_ms(lib)
    tf32(True)
    row["lib_tf32_error"] = norm_error(lib(), truth)
    row["lib_tf32_ms"] = bench_ms(lib)
    tf32(False)
    for precision in ("ieee", "tf32x3"):
        fn = lambda p=precision: gemm(a, b, precision=p)  # noqa: E731
        row[f"{precision}_error"] = norm_error(fn(), truth)
        row[f"{precision}_ms"] = bench_ms(fn)
    del truth
    return row


def conv_row(name, x, w, bias, padding) -> dict:
    row = {"case": name, "kind": "conv"}
    conv = F.conv2d if x.dim() == 4 else F.conv3d
    with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, allow_tf32=False):
        truth = conv(x.double(), w.double(), None if bias is None else bias.double(), padding=padding)
    for label, flag in (("lib_fp32", False), ("lib_tf32", True)):
        with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=False, allow_tf32=flag):
            fn = lambda: conv(x, w, bias, padding=padding)  # noqa: E731
            row[f"{label}_error"] = norm_error(fn(), truth)
            row[f"{label}_ms"] = bench_ms(fn)
    for precision in ("ieee", "tf32x3"):
        fn = lambda p=precision: conv_forward(x, w, bias, 1, padding, 1, False, 0, 1, precision=p)  # noqa: E731
        row[f"{precision}_error"] = norm_error(fn(), truth)
        row[f"{precision}_ms"] = bench_ms(fn)
    # The tap-outer kernel (kernels/conv/tap_gemm.py), the input as it comes and channels-last.
    for label, cl in (("taps", False), ("taps_cl", True)):
        fn = lambda cl=cl: conv_taps(x, w, bias, 1, padding, 1, False, 0, 1, precision="tf32x3", channels_last=cl)  # noqa: E731
        row[f"{label}_error"] = norm_error(fn(), truth)
        row[f"{label}_ms"] = bench_ms(fn)
    return row


def report(rows: list[dict], command: str) -> str:
    lines = [
        "# Float32 as three TF32 products (tf32x3) against the library's float32",
        "",
        f"`{command}` on {torch.cuda.get_device_name()} (torch {torch.__version__}, triton {triton.__version__}).",
        f"Times: median ms (`do_bench`, L2 flushed). Errors: `||got - truth|| / ||truth||` against float64; the judge's bound for "
        f"float32 outputs is {FP32_NORM_RTOL:g}. Speedups over the library's float32 (cuBLAS/cuDNN, TF32 off).",
        "",
        "| case | lib fp32 ms (error) | lib TF32 ms (error) | kloom ieee ms (error) | kloom tf32x3 ms (error) | tf32x3 speedup "
        "| conv by taps tf32x3, NCHW / channels-last: ms (error), speedup |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['error']} | | | | | |")
            continue
        cell = lambda k: f"{r[k + '_ms']:.3f} ({r[k + '_error']:.2g})"  # noqa: E731
        lines.append(
            f"| {r['case']} | {cell('lib_fp32')} | {cell('lib_tf32')} | {cell('ieee')} | {cell('tf32x3')} | {r['lib_fp32_ms'] / r['tf32x3_ms']:.2f}x | "
            + (" / ".join(f"{cell(k)}, {r['lib_fp32_ms'] / r[k + '_ms']:.2f}x" for k in ("taps", "taps_cl")) if "taps_ms" in r else "")
            + " |"
        )
    return "\n".join(lines + ["", "Autotuned GEMM configurations:", *[f"- {c}" for c in gemm_tuned_configs()]]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", choices=("gemm", "conv"), default=None)
    parser.add_argument("--budget-s", type=float, default=math.inf)
    args = parser.parse_args()
    command = " ".join(["python", "benchmarks/gpu/fp32x3_probe.py"] + sys.argv[1:])
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    todo = []
    if args.only in (None, "gemm"):
        todo += [(gemm_row, c) for c in gemm_cases()]
    if args.only in (None, "conv"):
        todo += [(conv_row, c) for c in conv_cases()]
    for fn, case in todo:
        if time.perf_counter() - started > args.budget_s:
            rows.append({"case": case[0], "error": "not started: over the time budget"})
            continue
        try:
            rows.append(fn(*case))
        except Exception as exc:  # one failing case is reported, the others still run
            rows.append({"case": case[0], "error": f"{type(exc).__name__}: {exc}"[:300]})
        print(rows[-1], flush=True)
        torch.cuda.empty_cache()
        (args.out / "fp32x3_probe.json").write_text(json.dumps(rows, indent=1))
        (args.out / "fp32x3_probe.md").write_text(report(rows, command))


if __name__ == "__main__":
    main()
