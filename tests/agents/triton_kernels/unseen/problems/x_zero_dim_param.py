"""An elementwise chain with 0-d tensor parameters."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.tensor(0.7))
        self.b = nn.Parameter(torch.tensor(-0.2))

    def forward(self, x):
        return torch.sigmoid(x * self.a + self.b)


def get_inputs():
    return [torch.randn(8, 20)]


def get_init_inputs():
    return []
