"""A 4-D batched product with a broadcast factor."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(2, 3, 10, 16), torch.randn(3, 16, 12)]


def get_init_inputs():
    return []
