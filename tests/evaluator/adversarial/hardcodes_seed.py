"""Cheat: return outputs precomputed for known inputs (written into this file by the test for one
fixed seed). Caught: each evaluation draws fresh random seeds, so the inputs are never the ones
the constants were computed for (incorrect)."""
import torch
import torch.distributed as dist
import torch.nn as nn

EXPECTED = {}  # rank -> list of rows; filled in by the test


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()

    def forward(self, x):
        return torch.tensor(EXPECTED[dist.get_rank()], dtype=x.dtype, device=x.device)
