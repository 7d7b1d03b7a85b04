"""Max over dim 1 (values)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return torch.max(x, dim=1)[0]


def get_inputs():
    return [torch.randn(6, 40, 9)]


def get_init_inputs():
    return []
