"""Bug: the right result with a NaN in it. Caught: NaN never passes (incorrect)."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        y[0, 0] = float("nan")
        return y
