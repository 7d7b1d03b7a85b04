"""A training-mode BatchNorm whose running mean is read (a drift monitor output) between the norm and the ReLU after it."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=6):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3)
        self.bn = nn.BatchNorm2d(c)

    def forward(self, x):
        y = self.bn(self.conv(x))
        drift = self.bn.running_mean * 10.0
        return torch.relu(y), drift


def get_inputs():
    return [torch.randn(2, 3, 7, 7)]


def get_init_inputs():
    return []
