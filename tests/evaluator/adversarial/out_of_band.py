"""Cheat: exchange results through the rendezvous store instead of a collective. Caught: the static
checker rejects the store (rejected)."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        store = dist.distributed_c10d._get_default_store()
        y = torch.mm(x, self.weight)
        store.set(f"partial{dist.get_rank()}", str(y.tolist()))
        return y
