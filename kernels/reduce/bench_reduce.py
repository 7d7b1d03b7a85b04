"""Benchmark of reductions against eager and inductor (``python -m kernels.reduce.bench_reduce``)."""

import torch

from kernels.benchmark import Case, run
from kernels.reduce.kernel import reduce


def _case(label, shape, dtype, reference, dims, op, keepdim=False, exact=False):
    def make():
        return (torch.randn(shape, device="cuda", dtype=dtype),)

    n = 1
    for s in shape:
        n *= s
    return Case("reduction", label, make, reference, lambda x: reduce(x, dims, op, keepdim), exact=exact, bytes=n * torch.finfo(dtype).bits // 8)


def cases() -> list[Case]:
    shape = (128, 4096, 1024)
    return [
        _case("sum over dim 1 of (128,4096,1024) fp32", shape, torch.float32, lambda x: torch.sum(x, dim=1, keepdim=True), [1], "sum", True),
        _case("sum over dim 1 of (64,4096,4095) fp32 (rows not 16-byte aligned)", (64, 4096, 4095), torch.float32, lambda x: torch.sum(x, dim=1, keepdim=True), [1], "sum", True),
        _case("argmax over dim 1 of (128,4096,1024) fp32", shape, torch.float32, lambda x: torch.argmax(x, dim=1), [1], "argmax", exact=True),
        _case("Frobenius norm of (16,64,512,512) fp32", (16, 64, 512, 512), torch.float32, lambda x: torch.norm(x, p="fro"), [], "norm2"),
        _case("mean over rows (16384,16384) bf16", (16384, 16384), torch.bfloat16, lambda x: x.mean(dim=1), [1], "mean"),
    ]


if __name__ == "__main__":
    run(cases(), None, "python -m kernels.reduce.bench_reduce")
