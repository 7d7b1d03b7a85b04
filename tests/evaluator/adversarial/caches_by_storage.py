"""Cheat: remember the output per input storage (address and shape) and return it whenever the
same buffer comes again, as the timing loop used to pass one input buffer over and over. Caught:
every timed call runs on inputs drawn afresh, and each timing round's last outputs are judged."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)
        self.seen = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key in self.seen and len(self.seen) > 3:  # honest through the trials
            part = self.seen[key]
        else:
            part = self.seen[key] = torch.mm(x, self.weight)
        y = part.clone()
        dist.all_reduce(y)  # every rank calls the collective every time
        return y
