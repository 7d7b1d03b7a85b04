"""addmm with a full (M, N) bias and a column bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, c, d, a, b):
        return torch.relu(torch.addmm(c, a, b)), torch.addmm(d, a, b)


def get_inputs():
    return [torch.randn(20, 24), torch.randn(20, 1), torch.randn(20, 16), torch.randn(16, 24)]


def get_init_inputs():
    return []
