"""Softmax over dim 0 of a 3-D tensor."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.softmax(x, dim=0)


def get_inputs():
    return [torch.randn(7, 5, 9)]


def get_init_inputs():
    return []
