"""A partial residual: a block's output added in place into a narrow view of its input's clone (only the first channels), ReLU in place over the whole."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=8, k=4):
        super().__init__()
        self.conv = nn.Conv2d(c, k, 3, padding=1)
        self.k = k

    def forward(self, x):
        out = x.clone()
        out.narrow(1, 0, self.k).add_(self.conv(x))
        return torch.relu_(out)


def get_inputs():
    return [torch.randn(2, 8, 5, 5)]


def get_init_inputs():
    return []
