"""Argmax over a bf16 activation (ties after rounding)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.argmax(torch.sigmoid(x * 2.0), dim=1)


def get_inputs():
    return [torch.randn(16, 300, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
