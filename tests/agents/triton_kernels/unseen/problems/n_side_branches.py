"""Elementwise branches that meet: a gated unit ``tanh(a) * sigmoid(b)`` on two halves of a
GEMM's output, a side branch of two ops (``sigmoid(c * 2 + 1)``), a per-channel side value
broadcast into the chain, and the cases that must stay out of the chain: a side value read twice,
a side value whose input is written in place before the chain reads it, a side value returned."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc = nn.Linear(d, 2 * d)
        self.scale = nn.Parameter(torch.randn(1, d))

    def forward(self, x, c, e):
        a, b = self.fc(x).chunk(2, dim=-1)
        gated = torch.tanh(a) * torch.sigmoid(b)  # two branches meet
        deep = torch.exp(gated) + torch.sigmoid(c * 2.0 + 1.0)  # a side branch of two ops
        chan = deep * torch.sigmoid(self.scale)  # a broadcast side value
        twice = torch.tanh(e)
        y = chan * twice + twice  # read twice: loaded, not recomputed
        s = torch.sigmoid(c)
        c.mul_(0.5)  # written after the side value was made
        z = torch.relu(y) * s
        r = torch.sigmoid(e * 3.0)
        w = torch.abs(z) + r  # r is returned too
        return w, r, c


def get_inputs():
    return [torch.randn(4, 16), torch.randn(4, 16), torch.randn(4, 16)]


def get_init_inputs():
    return []
