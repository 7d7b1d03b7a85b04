"""GELU (tanh) in bf16 then a cast to float."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.gelu(x, approximate='tanh').float() * 2


def get_inputs():
    return [torch.randn(8, 40, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
