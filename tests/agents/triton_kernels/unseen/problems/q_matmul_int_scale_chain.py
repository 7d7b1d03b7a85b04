"""A product, then a divide by the row's max abs, a round and a clamp (fake quantisation)"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(24, 16) * 0.2)

    def forward(self, *xs):
        y = xs[0] @ self.w
        s = y.abs().amax(dim=-1, keepdim=True) / 127.0
        return torch.clamp(torch.round(y / s), -128, 127) * s


def get_inputs():
    return [torch.randn(12, 24)]


def get_init_inputs():
    return []
