"""KernelBench-like: one large input, an output of the same size, no parameters (a level-1
elementwise problem at a size chosen against a small device-memory limit in the tests)."""

import torch
import torch.nn as nn

WORLD_SIZES = [1]
N = 512  # 512 x 512 float32: 1 MiB in, 1 MiB out


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(N, N)]
