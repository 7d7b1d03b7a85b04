"""LocalResponseNorm over channels"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lrn = nn.LocalResponseNorm(3, alpha=1e-3, beta=0.75, k=2.0)

    def forward(self, *xs):
        return self.lrn(F.relu(xs[0]))


def get_inputs():
    return [torch.randn(2, 8, 6, 6)]


def get_init_inputs():
    return []
