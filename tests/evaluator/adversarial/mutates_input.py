"""Cheat: reuse the input's memory for scratch work, which the caller did not agree to. Caught: the
input is fingerprinted before and after the call; the reference leaves it alone (incorrect)."""
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
        x.zero_()
        return y
