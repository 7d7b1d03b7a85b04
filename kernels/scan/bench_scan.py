"""Benchmark of cumulative sums against eager and inductor (``python -m kernels.scan.bench_scan``)."""

import torch

from kernels.benchmark import Case, run
from kernels.elementwise.opcodes import EW_OPS
from kernels.scan.kernel import scan


def cases() -> list[Case]:
    shape = (16384, 16384)

    def make():
        return (torch.randn(shape, device="cuda"),)

    def make_masked():
        return torch.randn(shape, device="cuda"), torch.rand(shape, device="cuda") > 0.5

    mask_program = (EW_OPS["mul"].code, 0, 0, 4)
    n = 16384 * 16384
    return [
        Case("scan", "cumsum rows (16384,16384) fp32", make, lambda x: torch.cumsum(x, 1), lambda x: scan(x, 1), bytes=8 * n),
        Case("scan", "reversed cumsum (16384,16384) fp32", make, lambda x: torch.cumsum(x.flip(1), 1).flip(1), lambda x: scan(x, 1, reverse=True), bytes=8 * n),
        Case(
            "scan", "masked cumsum (16384,16384) fp32", make_masked, lambda x, m: torch.cumsum(x * m, 1),
            lambda x, m: scan(x, 1, pre=([m], mask_program, ())), bytes=9 * n,
        ),  # fmt: skip
    ]


if __name__ == "__main__":
    run(cases(), None, "python -m kernels.scan.bench_scan")
