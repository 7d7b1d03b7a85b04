"""GroupNorm of a 5-D input, one group."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(1, 6)

    def forward(self, x):
        return self.gn(x)


def get_inputs():
    return [torch.randn(2, 6, 3, 4, 5)]


def get_init_inputs():
    return []
