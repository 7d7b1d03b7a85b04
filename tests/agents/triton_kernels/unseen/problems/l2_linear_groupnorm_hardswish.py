"""Linear, GroupNorm, HardSwish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, i, o, g):
        super().__init__()
        self.fc = nn.Linear(i, o)
        self.gn = nn.GroupNorm(g, o)

    def forward(self, x):
        return F.hardswish(self.gn(self.fc(x)))


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return [24, 32, 4]
