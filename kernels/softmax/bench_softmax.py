"""Benchmark of softmax/log-softmax against eager and inductor (``python -m kernels.softmax.bench_softmax``)."""

import torch

from kernels.benchmark import Case, run
from kernels.softmax.kernel import softmax


def _case(shape, dim, log, dtype, label):
    def make():
        return (torch.randn(shape, device="cuda", dtype=dtype),)

    def reference(x):
        return torch.log_softmax(x, dim) if log else torch.softmax(x, dim)

    def kernel(x):
        return softmax(x, dim, log=log)

    n = 1
    for s in shape:
        n *= s
    return Case("softmax", label, make, reference, kernel, bytes=2 * n * torch.finfo(dtype).bits // 8)


def cases() -> list[Case]:
    return [
        _case((4096, 16384), 1, False, torch.float32, "softmax rows (4096,16384) fp32 (one read)"),
        _case((1024, 393216), 1, False, torch.float32, "softmax long rows (1024,393216) fp32 (two reads)"),
        _case((16384, 4096), 1, True, torch.bfloat16, "log_softmax (16384,4096) bf16"),
        _case((64, 128, 64, 64), 1, False, torch.float32, "softmax over channels (64,128,64,64) fp32"),
    ]


if __name__ == "__main__":
    run(cases(), None, "python -m kernels.softmax.bench_softmax")
