"""A bfloat16 sum over dim 0."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return torch.sum(x, dim=0)


def get_inputs():
    return [torch.randn(30, 40, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
