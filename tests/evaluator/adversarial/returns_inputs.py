"""Cheat: hand back the input tensor itself. Caught: wrong shape and values (incorrect)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()

    def forward(self, x):
        return x
