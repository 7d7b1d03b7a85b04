"""A side branch whose loads would not fit the elementwise program's four operands: the chain
loads its value instead of computing it (and keeps the product after it)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, a, b, c, d):
        return torch.relu(x) * (a * b + c * d) + 1.0


def get_inputs():
    return [torch.randn(4, 32) for _ in range(5)]


def get_init_inputs():
    return []
