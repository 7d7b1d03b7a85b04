"""Elementwise chain with (C, 1, 1) parameters."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(c, 1, 1))
        self.bias = nn.Parameter(torch.randn(c, 1, 1))

    def forward(self, x):
        return torch.sigmoid(x * self.scale + self.bias) * x - self.bias


def get_inputs():
    return [torch.randn(2, 5, 7, 6)]


def get_init_inputs():
    return [5]
