"""Benchmark of cross-entropy against eager and inductor (``python -m kernels.cross_entropy.bench_cross_entropy``)."""

import torch
import torch.nn.functional as F

from kernels.benchmark import Case, run
from kernels.cross_entropy.kernel import cross_entropy


def _case(rows, classes, dtype):
    def make():
        return torch.randn(rows, classes, device="cuda", dtype=dtype), torch.randint(0, classes, (rows,), device="cuda")

    return Case(
        "cross_entropy", f"cross_entropy ({rows},{classes}) {str(dtype).replace('torch.', '')}", make,
        lambda x, t: F.cross_entropy(x, t), lambda x, t: cross_entropy(x, t), bytes=rows * classes * torch.finfo(dtype).bits // 8,
    )  # fmt: skip


def cases() -> list[Case]:
    return [_case(32768, 4096, torch.float32), _case(8192, 32768, torch.bfloat16)]


if __name__ == "__main__":
    run(cases(), None, "python -m kernels.cross_entropy.bench_cross_entropy")
