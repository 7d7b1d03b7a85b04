"""Conv2d, subtract a (C,1,1) parameter, tanh, sum over channels."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.p = nn.Parameter(torch.randn(16, 1, 1))

    def forward(self, x):
        x = torch.tanh(self.conv(x) - self.p)
        return torch.sum(x, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(2, 3, 9, 9)]


def get_init_inputs():
    return []
