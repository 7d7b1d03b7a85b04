"""Off-diagonal triangles of products of full matrices."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.triu(torch.mm(a, b), diagonal=1), torch.tril(torch.mm(a, b), diagonal=-2)


def get_inputs():
    return [torch.randn(24, 24), torch.randn(24, 24)]


def get_init_inputs():
    return []
