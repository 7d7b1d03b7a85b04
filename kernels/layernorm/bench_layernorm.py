"""Benchmark of LayerNorm/RMSNorm/GroupNorm against eager and inductor (``python -m kernels.layernorm.bench_layernorm``)."""

import torch
import torch.nn.functional as F

from kernels.benchmark import Case, run
from kernels.layernorm.kernel import group_norm, layer_norm, rms_norm


def _layer_norm_rows():
    shape = (16384, 4096)

    def make():
        return (torch.randn(shape, device="cuda", dtype=torch.bfloat16), torch.randn(4096, device="cuda", dtype=torch.bfloat16), torch.randn(4096, device="cuda", dtype=torch.bfloat16))

    return Case(
        "layer_norm", "LayerNorm rows (16384,4096) bf16", make,
        lambda x, w, b: F.layer_norm(x, (4096,), w, b), lambda x, w, b: layer_norm(x, 1, w, b), bytes=4 * 16384 * 4096,
    )  # fmt: skip


def _layer_norm_big():
    shape = (16, 64, 256, 256)

    def make():
        return (torch.randn(shape, device="cuda") * 2 + 1,)

    return Case(
        "layer_norm", "LayerNorm over (64,256,256) of (16,64,256,256) fp32 (long rows)", make,
        lambda x: F.layer_norm(x, shape[1:]), lambda x: layer_norm(x, 3), bytes=8 * 16 * 64 * 256 * 256,
    )  # fmt: skip


def _rms_norm():
    shape = (16384, 8192)

    def make():
        return (torch.randn(shape, device="cuda"), torch.randn(8192, device="cuda"))

    return Case(
        "layer_norm", "RMSNorm rows (16384,8192) fp32", make,
        lambda x, w: F.rms_norm(x, (8192,), w, 1e-6), lambda x, w: rms_norm(x, 1, w, 1e-6), bytes=8 * 16384 * 8192,
    )  # fmt: skip


def _group_norm():
    shape = (32, 64, 256, 256)

    def make():
        return (torch.randn(shape, device="cuda"), torch.randn(64, device="cuda"), torch.randn(64, device="cuda"))

    return Case(
        "layer_norm", "GroupNorm 8 groups (32,64,256,256) fp32", make,
        lambda x, w, b: F.group_norm(x, 8, w, b), lambda x, w, b: group_norm(x, 8, w, b), bytes=8 * 32 * 64 * 256 * 256,
    )  # fmt: skip


def cases() -> list[Case]:
    return [_layer_norm_rows(), _layer_norm_big(), _rms_norm(), _group_norm()]


if __name__ == "__main__":
    run(cases(), None, "python -m kernels.layernorm.bench_layernorm")
