"""Cheat: compute once, then return the cached result for every later call. Caught: every trial uses
fresh random inputs (incorrect from the second trial)."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)
        self.cache = None

    def forward(self, x):
        if self.cache is None:
            y = torch.mm(x, self.weight)
            dist.all_reduce(y)
            self.cache = y
        return self.cache
