"""Conv2d, tanh, scale, bias, MaxPool."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.b = nn.Parameter(torch.randn(16, 1, 1))

    def forward(self, x):
        x = torch.tanh(self.conv(x)) * 2.0 + self.b
        return F.max_pool2d(x, 2)


def get_inputs():
    return [torch.randn(2, 3, 11, 11)]


def get_init_inputs():
    return []
