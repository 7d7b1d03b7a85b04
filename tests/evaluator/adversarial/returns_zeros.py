"""Cheat: skip the work and return zeros of the right shape. Caught: outputs differ (incorrect)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        return torch.zeros(x.shape[0], self.n, dtype=x.dtype, device=x.device)
