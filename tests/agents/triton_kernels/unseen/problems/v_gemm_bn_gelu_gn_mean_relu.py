"""Gemm, BatchNorm1d (training), GELU, GroupNorm, mean, ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(24, 32)
        self.bn = nn.BatchNorm1d(32)
        self.gn = nn.GroupNorm(4, 32)

    def forward(self, x):
        x = F.gelu(self.bn(self.fc(x)))
        x = self.gn(x)
        return torch.relu(torch.mean(x, dim=1, keepdim=True))


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return []
