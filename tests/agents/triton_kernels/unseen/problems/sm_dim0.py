"""Softmax over dim 0."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=0)


def get_inputs():
    return [torch.randn(50, 33)]


def get_init_inputs():
    return []
