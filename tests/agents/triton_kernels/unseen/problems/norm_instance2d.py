"""InstanceNorm2d."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = nn.InstanceNorm2d(c)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(3, 5, 9, 7)]


def get_init_inputs():
    return [5]
