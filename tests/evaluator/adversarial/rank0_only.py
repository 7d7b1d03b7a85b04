"""Cheat: compute the result on rank 0 only; other ranks return zeros. Caught: every rank's outputs
are compared (incorrect on rank 1)."""
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
        if dist.get_rank() != 0:
            return torch.zeros_like(y)
        return y
