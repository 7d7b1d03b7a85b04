"""Max pool with dilation and padding, and an avg pool with a stride unlike its kernel"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, *xs):
        x = xs[0]
        return F.max_pool2d(x, 3, stride=2, padding=1, dilation=2) .sum() + F.avg_pool2d(x, (2, 3), stride=(3, 1)).mean()


def get_inputs():
    return [torch.randn(2, 3, 14, 12)]


def get_init_inputs():
    return []
