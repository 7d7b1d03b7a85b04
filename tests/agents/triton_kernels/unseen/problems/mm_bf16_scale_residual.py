"""A bfloat16 product, scaled, plus a residual."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, a, b, r):
        return torch.matmul(a, b) * 0.5 + r


def get_inputs():
    return [torch.randn(32, 48, dtype=torch.bfloat16), torch.randn(48, 40, dtype=torch.bfloat16), torch.randn(32, 40, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
