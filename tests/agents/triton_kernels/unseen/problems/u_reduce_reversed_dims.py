"""A sum over dims given in reverse order; a non-consecutive max."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.sum(x, dim=(2, 1)), torch.amax(x, dim=(0, 2))


def get_inputs():
    return [torch.randn(3, 4, 5)]


def get_init_inputs():
    return []
