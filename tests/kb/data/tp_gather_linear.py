"""Sequence-parallel activations gathered from every rank, then a column-parallel linear layer.

The reference is written as a cautious port would be: it gathers into a list and concatenates, and
computes the layer in float64 before casting back (a kernel may keep float32 within tolerance)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "tensor_parallel"
DESCRIPTION = "All-gather of sequence shards, then a column-parallel linear layer with bias."
WORLD_SIZES = [1, 2, 4]

SHAPES = {
    "ci": dict(tokens=512, hidden=256, out=512, dtype=torch.float32),
    "gpu": dict(tokens=4096, hidden=4096, out=8192, dtype=torch.float32),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, out_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_per_rank, hidden, dtype=P["dtype"]) / hidden**0.5)
        self.bias = nn.Parameter(torch.randn(out_per_rank, dtype=P["dtype"]))

    def forward(self, x_shard):
        parts = [torch.empty_like(x_shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, x_shard)
        x = torch.cat(parts).double()
        return (x @ self.weight.double().t() + self.bias.double()).to(x_shard.dtype)


def get_init_inputs():
    return [P["hidden"], P["out"] // dist.get_world_size()]


def get_inputs():
    return [torch.randn(P["tokens"] // dist.get_world_size(), P["hidden"], dtype=P["dtype"])]
