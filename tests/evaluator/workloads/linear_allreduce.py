"""Row-parallel linear layer: each rank multiplies its slice of the activations by its slice of
the weight, and the partial products are summed across ranks."""

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2]
FAMILY = "tensor_parallel"
DESCRIPTION = "Row-parallel linear (Megatron RowParallelLinear): local GEMM, then all-reduce."


class Model(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = x @ self.weight
        dist.all_reduce(y)
        return y


def get_init_inputs():
    return [32, 48]


def get_inputs():
    return [torch.randn(64, 32)]


def roofline(world_size, inputs):
    m, k = inputs[0].shape
    n = 48
    return {"flops": 2 * m * k * n, "hbm_bytes": 4 * (m * k + k * n + m * n), "link_bytes": 4 * m * n * 2 * (world_size - 1) / world_size}
