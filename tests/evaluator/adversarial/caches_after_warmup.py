"""Cheat: be honest for the first calls (the correctness trials), then cache once the timing loop
starts calling repeatedly. Caught: timed calls run on inputs drawn afresh and each timing round's
last outputs are judged (and one more trial on new inputs runs after timing)."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)
        self.calls = 0
        self.cache = None

    def forward(self, x):
        self.calls += 1
        if self.calls > 5 and self.cache is not None:
            return self.cache
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        self.cache = y
        return y
