"""All-gather of activations, then a GEMM: communication first, compute after, nothing overlapped."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "tensor_parallel"
DESCRIPTION = "All-gather of activations, then a column-parallel GEMM (unoverlapped)."
WORLD_SIZES = [1, 2, 4]
SHAPES = {
    "ci": dict(tokens=256, hidden=256, ffn=256, dtype=torch.float32),
    "gpu": dict(tokens=8192, hidden=8192, ffn=8192, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, hidden, ffn_per_rank):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(ffn_per_rank, hidden, dtype=P["dtype"]) / hidden**0.5)

    def forward(self, x_shard):
        world = dist.get_world_size()
        gathered = torch.empty(world * x_shard.shape[0], x_shard.shape[1], dtype=x_shard.dtype, device=x_shard.device)
        dist.all_gather_into_tensor(gathered, x_shard)
        return gathered @ self.weight.t()


def get_init_inputs():
    return [P["hidden"], P["ffn"] // dist.get_world_size()]


def get_inputs():
    return [torch.randn(P["tokens"] // dist.get_world_size(), P["hidden"], dtype=P["dtype"])]
