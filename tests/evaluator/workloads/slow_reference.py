"""A reference that takes 0.4 s a call (a sleep after its all-reduce): slow, not hung (a test of
the deadlines that bound a baseline)."""

import time

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2]
FAMILY = "tensor_parallel"
DESCRIPTION = "All-reduce of a small tensor, then 0.4 s of host time."


class Model(nn.Module):
    def forward(self, x):
        y = x * 2
        dist.all_reduce(y)
        time.sleep(0.4)
        return y


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(16, 16)]
