"""bf16 cumulative product over dim 0."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.cumprod(x, dim=0)


def get_inputs():
    return [(1 + 0.02 * torch.randn(30, 12)).to(torch.bfloat16)]


def get_init_inputs():
    return []
