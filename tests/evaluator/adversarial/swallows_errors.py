"""Cheat: hide a failing fast path behind a bare except that returns zeros. Caught: the static
checker rejects handlers that swallow exceptions (rejected)."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        try:
            y = torch.mm(x, self.weight.t())
        except Exception:
            y = torch.zeros(x.shape[0], self.weight.shape[1])
        dist.all_reduce(y)
        return y
