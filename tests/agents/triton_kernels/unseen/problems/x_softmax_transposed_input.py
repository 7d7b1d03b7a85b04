"""Softmax of a transposed input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.softmax(x.transpose(1, 2), dim=-1)


def get_inputs():
    return [torch.randn(2, 30, 7)]


def get_init_inputs():
    return []
