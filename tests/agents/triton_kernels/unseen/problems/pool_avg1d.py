"""AvgPool1d with stride and padding."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool1d(kernel_size=5, stride=3, padding=2)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(4, 6, 50)]


def get_init_inputs():
    return []
