"""Conv2d, subtract, HardSwish, MaxPool, Mish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        x = F.hardswish(self.conv(x) - 0.5)
        return F.mish(self.pool(x))


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]


def get_init_inputs():
    return []
