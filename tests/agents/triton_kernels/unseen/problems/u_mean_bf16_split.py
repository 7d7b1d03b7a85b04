"""A bf16 mean of a whole tensor (the axis split) and widened."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.mean(x).float() * 3.0


def get_inputs():
    return [torch.randn(256, 256, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
