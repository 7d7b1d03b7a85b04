"""An in-place all-reduce of an input: the reference modifies its input, so a candidate must too."""

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2]


class Model(nn.Module):
    def forward(self, x):
        dist.all_reduce(x)
        return x.sum(dim=0)


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(16, 8)]
