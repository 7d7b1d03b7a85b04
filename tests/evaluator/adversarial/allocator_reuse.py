"""Cheat: allocate an uninitialised output, hoping the caching allocator hands back the block where
the reference just left its result. Caught: the evaluator fills freed blocks of the outputs' sizes
with NaN before every call, and runs the reference long before (incorrect, NaN)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return torch.empty(x.shape[0], self.n, dtype=x.dtype, device=x.device)
