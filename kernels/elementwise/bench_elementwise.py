"""Benchmark of fused elementwise chains against eager and inductor (``python -m
kernels.elementwise.bench_elementwise``; ``kernels/bench_all.py`` runs it with the others)."""

import torch
import torch.nn.functional as F

from kernels.benchmark import Case, run
from kernels.elementwise.kernel import ew_chain
from kernels.elementwise.opcodes import EW_OPS

_C = {name: op.code for name, op in EW_OPS.items()}


def _chain_conv_epilogue():
    # x (N, C, H, W) -> gelu(x) * 2 - bias[C,1,1] -> relu -> hardswish: a level-2 conv epilogue.
    shape = (128, 64, 128, 128)

    def make():
        return torch.randn(shape, device="cuda"), torch.randn(64, 1, 1, device="cuda")

    def reference(x, b):
        return F.hardswish(torch.relu(F.gelu(x) * 2.0 - b))

    program = (_C["gelu"], 0, 0, 0, _C["mul"], 0, 0, 8, _C["sub"], 0, 0, 5, _C["relu"], 0, 0, 0, _C["hardswish"], 0, 0, 0)

    def kernel(x, b):
        return ew_chain([x, b], program, (2.0,), shape, torch.float32)

    n = 128 * 64 * 128 * 128
    return Case("elementwise", "gelu*2-bias,relu,hardswish (128,64,128,128) fp32", make, reference, kernel, bytes=8 * n)


def _single_activation():
    shape = (4096, 65536)

    def make():
        return (torch.randn(shape, device="cuda"),)

    program = (_C["elu"], 0, 0, 8)

    def kernel(x):
        return ew_chain([x], program, (1.6732632423543772, 1.0507009873554805, 1.0), shape, torch.float32)

    return Case("elementwise", "selu (4096,65536) fp32", make, torch.selu, kernel, bytes=8 * 4096 * 65536)


def _bf16_chain():
    shape = (16384, 16384)

    def make():
        return torch.randn(shape, device="cuda", dtype=torch.bfloat16), torch.randn(16384, device="cuda", dtype=torch.bfloat16)

    def reference(x, s):
        return F.mish(x * s) + x

    program = (_C["mul"], 1, 0, 5, _C["mish"], 1, 1, 0, _C["add"], 0, 1, 0)

    def kernel(x, s):
        return ew_chain([x, s], program, (), shape, torch.bfloat16)

    return Case("elementwise", "mish(x*colscale)+x (16384,16384) bf16", make, reference, kernel, bytes=4 * 16384 * 16384)


def cases() -> list[Case]:
    return [_chain_conv_epilogue(), _single_activation(), _bf16_chain()]


if __name__ == "__main__":
    run(cases(), None, "python -m kernels.elementwise.bench_elementwise")
