"""Rank 1 fails in forward while rank 0 waits for it in a collective."""

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2]


class Model(nn.Module):
    def forward(self, x):
        if dist.get_rank() == 1:
            raise RuntimeError("rank 1 gives up")
        dist.all_reduce(x)
        return x


def get_init_inputs():
    return []


def get_inputs():
    return [torch.ones(4)]
