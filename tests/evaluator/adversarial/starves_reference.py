"""Cheat: take the process's threads so that the reference, timed in the same process beside the
candidate, runs slower. Caught: the run-time snapshot of process-wide settings includes the
thread count (rejected after the call that changed it, and the count restored)."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)
        torch.set_num_threads(torch.get_num_threads() + 7)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
