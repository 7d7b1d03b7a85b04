"""Sum over every dim, keepdim; amax over dims (1, -1)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.sum(x, dim=(0, 1, 2), keepdim=True), torch.amax(x, dim=(1, -1))


def get_inputs():
    return [torch.randn(3, 4, 5)]


def get_init_inputs():
    return []
