"""LayerNorm over the last two dimensions with its affine parameters."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.ln = nn.LayerNorm(shape)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(4, 8, 6, 10) * 2 + 1]


def get_init_inputs():
    return [(6, 10)]
