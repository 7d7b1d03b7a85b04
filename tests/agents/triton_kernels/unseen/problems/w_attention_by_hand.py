"""Attention written by hand: products, scale, softmax."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, q, k, v):
        s = torch.matmul(q, k.transpose(-2, -1)) / 8 ** 0.5
        return torch.matmul(torch.softmax(s, dim=-1), v)


def get_inputs():
    return [torch.randn(2, 3, 24, 8), torch.randn(2, 3, 20, 8), torch.randn(2, 3, 20, 8)]


def get_init_inputs():
    return []
