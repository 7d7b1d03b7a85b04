"""Cheat: import the reference and call it. Caught: the static checker (rejected)."""
import torch.nn as nn
from linear_allreduce import Model


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.ref = Model(k_per_rank, n)

    def forward(self, x):
        return self.ref(x)
