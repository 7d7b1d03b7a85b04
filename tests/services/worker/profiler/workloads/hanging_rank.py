"""Rank 0 never returns from forward (a stand-in for a kernel that waits on a peer forever)."""

import time

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [2]


class Model(nn.Module):
    def forward(self, x):
        if dist.get_rank() == 0:
            time.sleep(3600)
        dist.all_reduce(x)
        return x


def get_init_inputs():
    return []


def get_inputs():
    return [torch.ones(4)]
