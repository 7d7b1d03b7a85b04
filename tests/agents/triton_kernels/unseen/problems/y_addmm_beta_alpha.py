"""addmm with beta and alpha."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, c, a, b):
        return torch.addmm(c, a, b, beta=0.5, alpha=2.0)


def get_inputs():
    return [torch.randn(20, 24), torch.randn(20, 16), torch.randn(16, 24)]


def get_init_inputs():
    return []
