"""Norm-wise error of fp32 results computed at lower precision (TF32, bf16, fp16) against the
fp64 truth, beside honest fp32 variants (another summation order, a split-K, the reference
itself): the measurement behind the judge's fp32 norm-wise bound (compare.FP32_NORM_RTOL).

    .venv/bin/python benchmarks/precision_bound.py   (output: benchmarks/results/precision_bound_cpu.md)

TF32 is emulated on the CPU by rounding the operands' mantissas to 10 bits (round to nearest
even), then multiplying in fp32, which is what the tensor cores do with fp32 accumulation.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def tf32(x: torch.Tensor) -> torch.Tensor:
    bits = x.contiguous().view(torch.int32)
    lsb = (bits >> 13) & 1
    rounded = (bits + 0xFFF + lsb) & ~0x1FFF
    return rounded.view(torch.float32)


def rel(got: torch.Tensor, truth: torch.Tensor) -> float:
    return float((got.double() - truth).norm() / truth.norm().clamp_min(1e-300))


def cases():
    g = torch.Generator().manual_seed(0)
    for m, k, n in [(64, 32, 48), (256, 256, 256), (512, 1024, 512), (128, 4096, 128)]:
        a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
        truth = a.double() @ b.double()
        half = k // 2
        yield f"matmul {m}x{k}x{n}", truth, {
            "fp32 (reference)": a @ b,
            "fp32 split-K in 2": a[:, :half] @ b[:half] + a[:, half:] @ b[half:],
            "fp32 transposed": (b.t() @ a.t()).t(),
            "tf32": tf32(a) @ tf32(b),
            "bf16": (a.bfloat16() @ b.bfloat16()).float(),
            "fp16": (a.half().float() @ b.half().float()),
        }
    x, w = torch.randn(8, 32, 32, 32, generator=g), torch.randn(64, 32, 3, 3, generator=g)
    truth = F.conv2d(x.double(), w.double(), padding=1)
    yield "conv2d 8x32x32x32, 64x3x3", truth, {
        "fp32 (reference)": F.conv2d(x, w, padding=1),
        "tf32": F.conv2d(tf32(x), tf32(w), padding=1),
        "bf16": F.conv2d(x.bfloat16().float(), w.bfloat16().float(), padding=1),
    }
    x, w = torch.randn(256, 1024, generator=g), torch.randn(1024, 1024, generator=g) / 32
    truth = torch.softmax(x.double() @ w.double(), -1)
    yield "softmax(x @ w) 256x1024x1024", truth, {
        "fp32 (reference)": torch.softmax(x @ w, -1),
        "fp32 exp via exp2": (lambda z: (z * 1.4426950408889634).exp2() / (z * 1.4426950408889634).exp2().sum(-1, keepdim=True))((x @ w) - (x @ w).amax(-1, keepdim=True)),
        "tf32": torch.softmax(tf32(x) @ tf32(w), -1),
        "bf16": torch.softmax((x.bfloat16() @ w.bfloat16()).float(), -1),
    }
    x = torch.randn(512, 2048, generator=g)
    truth = F.layer_norm(x.double(), (2048,))
    yield "layer_norm 512x2048", truth, {
        "fp32 (reference)": F.layer_norm(x, (2048,)),
        "fp32 one-pass variance": (x - x.mean(-1, keepdim=True)) / ((x * x).mean(-1, keepdim=True) - x.mean(-1, keepdim=True) ** 2 + 1e-5).sqrt(),
        "bf16": F.layer_norm(x.bfloat16(), (2048,)).float(),
    }


def main() -> None:
    print("| workload | variant | ||got - fp64|| / ||fp64|| |")
    print("|---|---|---|")
    worst_honest, best_low = 0.0, float("inf")
    for name, truth, variants in cases():
        for variant, got in variants.items():
            err = rel(got, truth)
            print(f"| {name} | {variant} | {err:.2e} |")
            if variant.startswith("fp32"):
                worst_honest = max(worst_honest, err)
            else:
                best_low = min(best_low, err)
    print(f"\nworst honest fp32: {worst_honest:.2e}; smallest TF32/bf16/fp16 error: {best_low:.2e}")


if __name__ == "__main__":
    main()
