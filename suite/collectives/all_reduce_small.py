"""Latency-bound all-reduce: one decode step's activations (a few tokens x hidden) summed over
the tensor-parallel group, out of place. At 16-64 KiB the time is launch and synchronisation
latency, not bandwidth: the floor from the link bytes is far below what any NCCL call takes."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "collectives"
DESCRIPTION = "Small latency-bound all-reduce of a decode step's activations after a row-parallel layer (TP inference)."
SOURCE = "vLLM tensor_model_parallel_all_reduce on decode batches; nccl-tests all_reduce_perf at small sizes"
WORLD_SIZES = [2, 4, 8]
# Partial sums are scaled so that their total has unit variance; bf16 sums of up to 8 terms in
# another order differ by a few half-ulps of the partial sums (about 0.03 at worst).
TOLERANCE = {torch.bfloat16: (6.25e-2, 1.6e-2)}

SHAPES = {
    "ci": dict(tokens=4, hidden=1024, dtype=torch.float32),  # 16 KiB
    "gpu": dict(tokens=4, hidden=8192, dtype=torch.bfloat16),  # 64 KiB
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def forward(self, x):
        out = x.clone()
        dist.all_reduce(out)
        return out


def get_init_inputs():
    return []


def get_inputs():
    world = dist.get_world_size()
    return [torch.randn(P["tokens"], P["hidden"], dtype=P["dtype"]) / world**0.5]


def roofline(world_size, inputs):
    x = inputs[0]
    n, e = x.numel(), x.element_size()
    return {
        "flops": n * (world_size - 1) / world_size,
        "hbm_bytes": 2 * n * e,
        # ring all-reduce: reduce-scatter then all-gather, each sending (n-1)/n of the buffer
        "link_bytes": 2 * (world_size - 1) / world_size * n * e,
        "dtype": "bf16" if x.dtype == torch.bfloat16 else "fp32",
    }
