"""baddbmm."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, c, a, b):
        return torch.baddbmm(c, a, b)


def get_inputs():
    return [torch.randn(3, 20, 24), torch.randn(3, 20, 16), torch.randn(3, 16, 24)]


def get_init_inputs():
    return []
