"""bf16 input plus a float32 parameter (type promotion)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(20))

    def forward(self, x):
        return torch.tanh(x * self.w) + x


def get_inputs():
    return [torch.randn(8, 20, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
