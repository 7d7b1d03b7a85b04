"""A bf16 activation times a float32 parameter."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(40))

    def forward(self, x):
        return torch.tanh(x) * self.w


def get_inputs():
    return [torch.randn(8, 40, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
