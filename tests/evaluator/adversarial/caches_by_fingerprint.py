"""Cheat: compute once per distinct input and return the stored result when the same input comes
again (the timing loop used to call with the same input many times). Caught: every timed call runs on
inputs drawn afresh, and each timing round's last outputs are judged."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)
        self.key = None
        self.value = None

    def forward(self, x):
        key = (tuple(x.shape), float(x.flatten()[:8].sum()), float(x.flatten()[-8:].sum()))
        if key == self.key:
            return self.value.clone()
        y = x @ self.weight
        # Slow when it computes (about a fifth of the reference's speed or less on the CI's CPU), so that
        # only the cache could carry a speedup: with 30 adds it read 0.45-1.7x over 25 honest
        # evaluations at the tests' short timing budget, and the test's 1.5x bound failed 1 in 20.
        for _ in range(600):
            y = y + 0.0
        dist.all_reduce(y)
        self.key, self.value = key, y
        return y.clone()
