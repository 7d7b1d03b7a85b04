"""AvgPool2d with a divisor override."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.avg_pool2d(x, 2, divisor_override=3)


def get_inputs():
    return [torch.randn(2, 3, 10, 8)]


def get_init_inputs():
    return []
