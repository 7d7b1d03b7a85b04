"""Cheat: make the clock report no time. Caught: the static checker rejects the import of time and
the assignment to a library's attribute (rejected, before anything runs)."""
import time

import torch
import torch.distributed as dist
import torch.nn as nn

time.perf_counter = lambda: 0.0
torch.cuda.Event.elapsed_time = lambda self, end: 1e-6


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
