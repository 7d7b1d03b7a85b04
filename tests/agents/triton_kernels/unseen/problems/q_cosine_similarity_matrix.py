"""Rows L2-normalised, then their cosine similarity matrix, then a temperature softmax"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, *xs):
        a = F.normalize(xs[0], dim=-1)
        b = F.normalize(xs[1], dim=-1)
        return torch.softmax(a @ b.t() / 0.07, dim=-1)


def get_inputs():
    return [torch.randn(16, 32), torch.randn(24, 32)]


def get_init_inputs():
    return []
