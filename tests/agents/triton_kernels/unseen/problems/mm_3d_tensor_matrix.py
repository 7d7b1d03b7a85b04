"""A 3-D tensor times a matrix."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(3, 20, 32), torch.randn(32, 24)]


def get_init_inputs():
    return []
