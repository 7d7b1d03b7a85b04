"""An elementwise chain over a transposed input and a broadcast row."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x, y):
        return torch.relu(x * y + 1.0)


def get_inputs():
    return [torch.randn(30, 20).t(), torch.randn(30)]


def get_init_inputs():
    return []
