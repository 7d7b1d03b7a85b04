"""An outer product (K = 1) and a row vector times a matrix (M = 1)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b, c):
        return torch.mm(a, b), torch.mm(b, c)


def get_inputs():
    return [torch.randn(20, 1), torch.randn(1, 24), torch.randn(24, 12)]


def get_init_inputs():
    return []
