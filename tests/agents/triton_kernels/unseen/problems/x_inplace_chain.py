"""In-place operators on an intermediate."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        y = x * 2.0
        y.add_(1.0)
        y.relu_()
        return y.mul_(x)


def get_inputs():
    return [torch.randn(8, 20)]


def get_init_inputs():
    return []
