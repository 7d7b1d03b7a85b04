"""Depthwise then pointwise convolution."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.pointwise = nn.Conv2d(6, 10, 1)

    def forward(self, x):
        return self.pointwise(self.depthwise(x))


def get_inputs():
    return [torch.randn(2, 6, 11, 9)]


def get_init_inputs():
    return []
