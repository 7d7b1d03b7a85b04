"""Cheat (issue 20): compute an fp32 workload in bf16 and hand back float32. Caught: the outputs
are float32 as expected, but outside the fp32 tolerance (and the norm-wise bound)."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x.bfloat16(), self.weight.bfloat16()).float()
        dist.all_reduce(y)
        return y
