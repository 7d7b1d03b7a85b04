"""Conv2d with a residual input and a (1, C, 1, 1) scale in its chain."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 6, 3, padding=1)
        self.s = nn.Parameter(torch.randn(1, 6, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv(x) * self.s + x)


def get_inputs():
    return [torch.randn(2, 6, 8, 7)]


def get_init_inputs():
    return []
