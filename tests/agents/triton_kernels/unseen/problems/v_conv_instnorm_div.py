"""Conv2d, InstanceNorm, divide."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.n = nn.InstanceNorm2d(8)

    def forward(self, x):
        return self.n(self.conv(x)) / 2.0


def get_inputs():
    return [torch.randn(2, 3, 10, 9)]


def get_init_inputs():
    return []
