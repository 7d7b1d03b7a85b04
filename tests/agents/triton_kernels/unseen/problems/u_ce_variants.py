"""Cross-entropy summed, unreduced, and with default ignored targets."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, t):
        return F.cross_entropy(x, t, reduction='sum'), F.cross_entropy(x, t, reduction='none'), F.cross_entropy(x, torch.where(t > 6, -100, t))


def get_inputs():
    return [torch.randn(16, 10), torch.randint(0, 10, (16,))]


def get_init_inputs():
    return []
