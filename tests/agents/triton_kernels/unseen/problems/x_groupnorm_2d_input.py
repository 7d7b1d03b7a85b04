"""GroupNorm of a (N, C) input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(4, 16)

    def forward(self, x):
        return self.gn(x)


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return []
