"""Batched product then InstanceNorm over its rows."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = nn.InstanceNorm1d(10)

    def forward(self, a, b):
        return self.n(torch.bmm(a, b))


def get_inputs():
    return [torch.randn(3, 10, 16), torch.randn(3, 16, 12)]


def get_init_inputs():
    return []
