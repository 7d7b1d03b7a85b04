"""GLU, hardshrink, softshrink, tanhshrink, softmin"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, *xs):
        x = xs[0]
        return F.glu(x, dim=-1) + F.hardshrink(x[..., :16], 0.3) + F.softshrink(x[..., 16:], 0.2) + F.tanhshrink(x[..., :16]) + F.softmin(x[..., 16:], dim=-1)


def get_inputs():
    return [torch.randn(6, 32) * 2]


def get_init_inputs():
    return []
