"""GroupNorm with one channel a group, then a (C, 1, 1) scale."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(6, 6)
        self.s = nn.Parameter(torch.randn(6, 1, 1))

    def forward(self, x):
        return self.gn(x) * self.s


def get_inputs():
    return [torch.randn(2, 6, 5, 7)]


def get_init_inputs():
    return []
