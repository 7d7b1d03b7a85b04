"""InstanceNorm1d, affine."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = nn.InstanceNorm1d(6, affine=True)

    def forward(self, x):
        return self.n(x)


def get_inputs():
    return [torch.randn(3, 6, 25)]


def get_init_inputs():
    return []
