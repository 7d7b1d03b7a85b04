"""nn.Bilinear of two inputs, then layer norm"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bl = nn.Bilinear(6, 5, 7)
        self.ln = nn.LayerNorm(7)

    def forward(self, *xs):
        return self.ln(self.bl(xs[0], xs[1]))


def get_inputs():
    return [torch.randn(8, 6), torch.randn(8, 5)]


def get_init_inputs():
    return []
