"""BatchNorm2d with a cumulative average (momentum=None), training."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4, momentum=None)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(3, 4, 5, 5)]


def get_init_inputs():
    return []
