"""Gather rows by index, scale, scatter-add back"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, *xs):
        x, idx = xs
        g = torch.gather(x, 1, idx) * 2.0
        return torch.zeros_like(x).scatter_add(1, idx, g) + x


def get_inputs():
    return [torch.randn(6, 10), torch.randint(0, 10, (6, 4))]


def get_init_inputs():
    return []
