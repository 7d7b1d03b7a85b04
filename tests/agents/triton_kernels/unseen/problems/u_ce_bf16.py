"""bf16 cross-entropy."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, t):
        return F.cross_entropy(x, t)


def get_inputs():
    return [torch.randn(16, 300, dtype=torch.bfloat16) * 3, torch.randint(0, 300, (16,))]


def get_init_inputs():
    return []
