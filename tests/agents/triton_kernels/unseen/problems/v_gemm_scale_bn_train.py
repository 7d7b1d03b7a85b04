"""Gemm, scale, BatchNorm1d (training)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(24, 32)
        self.s = nn.Parameter(torch.randn(32))
        self.bn = nn.BatchNorm1d(32, eps=1e-3, momentum=0.2)

    def forward(self, x):
        return self.bn(self.fc(x) * self.s)


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return []
