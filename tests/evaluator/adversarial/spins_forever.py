"""Bug: loops forever. Caught: timeout; the pool is killed and rebuilt."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()

    def forward(self, x):
        while True:
            x = x + 1
