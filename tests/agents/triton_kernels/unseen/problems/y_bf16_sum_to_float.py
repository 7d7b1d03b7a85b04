"""A bf16 row sum widened to float32."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.sum(x, dim=1).float() * 2.0


def get_inputs():
    return [torch.randn(8, 300, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
