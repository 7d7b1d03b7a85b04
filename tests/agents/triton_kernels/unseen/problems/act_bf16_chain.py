"""A bfloat16 activation chain."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return F.silu(x) * torch.sigmoid(x) + 1.0


def get_inputs():
    return [torch.randn(16, 300, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
