"""A bf16 softmax widened to float32."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.softmax(x, dim=-1).float() + 1.0


def get_inputs():
    return [torch.randn(8, 100, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
