"""Pairwise distances, then the nearest one per row"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, *xs):
        d = torch.cdist(xs[0], xs[1])
        return d.min(dim=-1).values


def get_inputs():
    return [torch.randn(20, 8), torch.randn(30, 8)]


def get_init_inputs():
    return []
