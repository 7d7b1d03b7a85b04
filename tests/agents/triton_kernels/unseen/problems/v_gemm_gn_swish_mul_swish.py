"""Gemm, GroupNorm, Swish, multiply, Swish."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(24, 32)
        self.gn = nn.GroupNorm(8, 32)
        self.w = nn.Parameter(torch.randn(32))

    def forward(self, x):
        x = self.gn(self.fc(x))
        x = x * torch.sigmoid(x) * self.w
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return []
