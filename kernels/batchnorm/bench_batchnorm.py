"""Benchmark of training-mode BatchNorm against eager and inductor (``python -m kernels.batchnorm.bench_batchnorm``).

Both sides update their own copies of the running statistics on every call, as the reference does."""

import torch
import torch.nn.functional as F

from kernels.batchnorm.kernel import batch_norm
from kernels.benchmark import Case, run


def _train():
    shape = (64, 64, 256, 256)

    def make():
        c = shape[1]
        return (torch.randn(shape, device="cuda"), torch.randn(c, device="cuda"), torch.randn(c, device="cuda"),
                torch.zeros(c, device="cuda"), torch.ones(c, device="cuda"))  # fmt: skip

    def reference(x, w, b, rm, rv):
        return F.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5)

    def kernel(x, w, b, rm, rv):
        return batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)

    return Case("batch_norm", "BatchNorm2d train (64,64,256,256) fp32", make, reference, kernel, bytes=12 * 64 * 64 * 256 * 256)


def cases() -> list[Case]:
    return [_train()]


if __name__ == "__main__":
    run(cases(), None, "python -m kernels.batchnorm.bench_batchnorm")
