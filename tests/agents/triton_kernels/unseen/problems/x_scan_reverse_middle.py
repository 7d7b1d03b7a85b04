"""Reverse cumulative sum over a middle axis."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])


def get_inputs():
    return [torch.randn(3, 40, 6)]


def get_init_inputs():
    return []
