"""A trunk whose features are split (torch.split with sizes) into three heads, returned as a tuple with one a transposed view."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, din=16, sizes=(4, 6, 6)):
        super().__init__()
        self.sizes = list(sizes)
        self.fc = nn.Linear(din, sum(sizes))

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        a, b, c = torch.split(h, self.sizes, dim=-1)
        return a.sigmoid(), b.transpose(0, 1), c * 2.0


def get_inputs():
    return [torch.randn(5, 3, 16)]


def get_init_inputs():
    return []
