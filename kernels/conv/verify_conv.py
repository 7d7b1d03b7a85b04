"""The convolution kernel checked on a GPU against the exact result, beside eager PyTorch (cuDNN):
the shapes the first GPU run flagged (at their sizes, under every tile configuration autotuning
may pick) and the corners (strided, dilated, grouped and output-padded transposed convolutions,
1-D, 3-D, channels-last, float16/bfloat16 with a bias that cancels the convolution).

Each case reports, in units of the judge's tolerance (``|got - want| / (atol + rtol |want|)``,
at most 1 passes): kloom against eager (what the judge checks), kloom against the float64 result
and eager against the float64 result (who is closer to the truth). A 16-bit case where eager is
farther from the truth than kloom is eager's rounding (it rounds the convolution before it adds
the bias), not kloom's error. It also checks that signed integer division on this GPU rounds
toward zero as the interpreter that runs the CPU tests does.

    python kernels/conv/verify_conv.py --out "$OUT" [--budget-s 60]

Writes ``verify_conv.json`` and ``verify_conv.md`` under ``--out`` after every case; exits 1 when
a case is wrong. Imports torch, triton, the standard library and kernel modules.
"""

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from kernels.conv.implicit_gemm import conv_configs, conv_forward  # noqa: E402
from kernels.gemm.epilogue import gemm_chain  # noqa: E402
from kernels.int_division import C_BY_TWO, DIVIDENDS, divide_by  # noqa: E402

#: Where the cases run (the CPU under TRITON_INTERPRET=1 only to try this script on small cases).
DEVICE = "cuda"
TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (1e-2, 1.6e-2), torch.float16: (1e-3, 1e-3)}


@dataclass(frozen=True)
class Case:
    name: str
    x: tuple
    w: tuple
    dtype: torch.dtype = torch.float32
    bias: str = ""  # "", "random", or "cancel" (the negated convolution at one position per channel)
    stride: object = 1
    padding: object = 0
    dilation: object = 1
    transposed: bool = False
    output_padding: object = 0
    groups: int = 1
    relu: bool = False
    channels_last: bool = False
    every_config: bool = False  # every tile configuration autotuning may pick (else the first: one compile)


CASES = [
    # The three the first H100 run reported with a nonzero error against eager, at its sizes.
    Case("conv2d 3x3 64->128 16x128x128 + bias + relu bfloat16 (run 1)", (16, 64, 128, 128), (128, 64, 3, 3), torch.bfloat16, "random", 1, 1, relu=True, every_config=True),
    Case("conv2d 3x3 64->128 16x128x128 + bias + relu float32 (run 1)", (16, 64, 128, 128), (128, 64, 3, 3), torch.float32, "random", 1, 1, relu=True, every_config=True),
    Case("conv_transpose2d 4x4 s2 p1 64->32 8x64x64 float32 (run 1)", (8, 64, 64, 64), (64, 32, 4, 4), torch.float32, "", 2, 1, transposed=True, every_config=True),
    Case("conv2d bfloat16, bias cancelling the convolution", (4, 32, 32, 32), (64, 32, 3, 3), torch.bfloat16, "cancel", 1, 1),
    Case("conv_transpose2d float16 s2 + bias", (4, 32, 33, 31), (32, 16, 3, 3), torch.float16, "random", 2, 1, transposed=True, output_padding=1),
    Case("conv_transpose2d s3 p2 d2 op1 groups=2", (2, 8, 13, 11), (8, 3, 3, 4), torch.float32, "random", 3, 2, 2, True, 1, 2),
    Case("conv_transpose3d s2 p1", (2, 8, 6, 7, 5), (8, 4, 3, 3, 3), torch.float32, "random", 2, 1, transposed=True, output_padding=1),
    Case("conv_transpose1d s4 p3 d3", (4, 16, 37), (16, 8, 5), torch.float32, "", 4, 3, 3, True),
    Case("conv2d s2 p2 d2 groups=4", (4, 32, 41, 37), (64, 8, 3, 3), torch.float32, "random", 2, 2, 2, groups=4),
    Case("conv2d channels-last input", (8, 64, 56, 56), (64, 64, 3, 3), torch.float32, "random", 1, 1, channels_last=True, relu=True),
    Case("conv1d s2 p1", (8, 32, 1001), (48, 32, 7), torch.float32, "random", 2, 3),
    Case("conv3d 3x3x3 p1", (2, 16, 12, 20, 20), (32, 16, 3, 3, 3), torch.float32, "random", 1, 1),
    Case("depthwise conv2d groups=64", (8, 64, 64, 64), (64, 1, 3, 3), torch.float32, "random", 1, 1, groups=64),
]


def tolerance_units(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> float:
    """The largest ``|got - want| / (atol + rtol |want|)``: at most 1 is within tolerance."""
    got, want = got.double(), want.double()
    return float(((got - want).abs() / (atol + rtol * want.abs())).max())


def reference(case: Case, x, w, b, dtype) -> torch.Tensor:
    """``aten.convolution`` (cuDNN in ``dtype``, or float64), the bias, then the ReLU."""
    nd = x.dim() - 2

    def tup(v):
        return (v,) * nd if isinstance(v, int) else tuple(v)

    y = torch.ops.aten.convolution(
        x.to(dtype), w.to(dtype), None, tup(case.stride), tup(case.padding), tup(case.dilation), case.transposed, tup(case.output_padding), case.groups
    )
    if b is not None:
        y = y + b.to(dtype).view(1, -1, *([1] * nd))
    return torch.relu(y) if case.relu else y


def run_case(case: Case) -> dict:
    torch.manual_seed(0)
    x = torch.randn(case.x, device=DEVICE, dtype=case.dtype)
    if case.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(case.w, device=DEVICE, dtype=case.dtype)
    channels = case.w[1] * case.groups if case.transposed else case.w[0]
    b = None
    if case.bias == "random":
        b = torch.randn(channels, device=DEVICE, dtype=case.dtype)
    elif case.bias == "cancel":
        conv = reference(Case(**{**case.__dict__, "relu": False}), x, w, None, torch.float64)
        b = (-conv[0, :].reshape(channels, -1)[:, conv[0, 0].numel() // 2]).to(case.dtype)
    truth = reference(case, x, w, b, torch.float64)
    eager = reference(case, x, w, b, case.dtype)
    atol, rtol = TOLERANCE[case.dtype]
    post = ([], *gemm_chain("relu")) if case.relu else None
    args = (case.stride, case.padding, case.dilation, case.transposed, case.output_padding, case.groups, post)
    row = {"case": case.name, "dtype": str(case.dtype).replace("torch.", ""), "eager_vs_truth": tolerance_units(eager, truth, atol, rtol)}
    configs = conv_configs(case.dtype) if case.every_config else conv_configs(case.dtype)[:1]
    worst = {"kloom_vs_eager": 0.0, "kloom_vs_truth": 0.0, "kloom_abs_vs_eager": 0.0}
    for config in configs:
        got = conv_forward(x, w, b, *args, config=config)
        if got.shape != eager.shape:
            row["error"] = f"shape {tuple(got.shape)} instead of {tuple(eager.shape)}"
            return row
        worst["kloom_vs_eager"] = max(worst["kloom_vs_eager"], tolerance_units(got, eager, atol, rtol))
        worst["kloom_vs_truth"] = max(worst["kloom_vs_truth"], tolerance_units(got, truth, atol, rtol))
        worst["kloom_abs_vs_eager"] = max(worst["kloom_abs_vs_eager"], float((got.double() - eager.double()).abs().max()))
    row.update(worst, configs=len(configs))
    # Correct: within tolerance of the exact result, or at least as close to it as eager. The
    # judge compares with eager instead; a case built to make eager round badly (a cancelling
    # bias) can fail there while kloom is right.
    row["correct"] = row["kloom_vs_truth"] <= max(1.0, row["eager_vs_truth"])
    row["judge_passes"] = row["kloom_vs_eager"] <= 1
    return row


def signed_division() -> dict:
    """Signed ``//`` and ``%`` on this GPU (the interpreter's tests expect C's truncation)."""
    q, r = divide_by(list(DIVIDENDS), 2, DEVICE)
    return {"quotients": q, "remainders": r, "truncates_like_the_interpreter": (q, r) == C_BY_TWO}


def write(out: Path, rows: list[dict], division: dict, not_run: list[str]) -> None:
    lines = [
        "# The convolution kernel against eager (cuDNN) and the exact (float64) result",
        "",
        f"{torch.cuda.get_device_name() if DEVICE == 'cuda' else DEVICE}, torch {torch.__version__}, triton {triton.__version__}. Errors in units of the judge's "
        "tolerance (at most 1 passes): fp32 (1e-4, 1e-4), bf16 (1e-2, 1.6e-2), fp16 (1e-3, 1e-3); the worst over the tile "
        "configurations checked. `eager vs exact` larger than `kloom vs exact`: eager's rounding, not kloom's.",
        "",
        f"Signed integer division on the GPU: {division}",
        "",
        "| case | configs | kloom vs eager (judge) | kloom vs exact | eager vs exact | max abs vs eager | correct |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['case']} | error: {r['error'][:200]} ||||| **no** |")
            continue
        judge = "" if r["judge_passes"] else " (judge rejects)"
        lines.append(
            f"| {r['case']} | {r['configs']} | {r['kloom_vs_eager']:.3f}{judge} | {r['kloom_vs_truth']:.3f} | {r['eager_vs_truth']:.3f} | "
            f"{r['kloom_abs_vs_eager']:.3g} | {'yes' if r['correct'] else '**no**'} |"
        )
    if not_run:
        lines += ["", "Not run within the budget: " + "; ".join(not_run)]
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify_conv.json").write_text(json.dumps({"signed_division": division, "cases": rows, "not_run": not_run}, indent=1))
    (out / "verify_conv.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=60.0, help="start no case after this many seconds")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    started = time.perf_counter()
    division = signed_division()
    rows: list[dict] = []
    for i, case in enumerate(CASES):
        if time.perf_counter() - started > args.budget_s:
            write(args.out, rows, division, [c.name for c in CASES[i:]])
            break
        try:
            rows.append(run_case(case))
        except Exception as exc:  # one failing case is reported, the others still run
            rows.append({"case": case.name, "error": f"{type(exc).__name__}: {exc}"[:300], "correct": False})
        rows[-1]["seconds"] = round(time.perf_counter() - started, 1)
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()
        write(args.out, rows, division, [])
    wrong = [r["case"] for r in rows if not r.get("correct")]
    print("wrong:" if wrong else "all correct", "; ".join(wrong), "| signed division truncates:", division["truncates_like_the_interpreter"])
    sys.exit(1 if wrong or not division["truncates_like_the_interpreter"] else 0)


if __name__ == "__main__":
    main()
