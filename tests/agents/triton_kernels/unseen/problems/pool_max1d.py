"""MaxPool1d with stride, padding and dilation."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(kernel_size=4, stride=2, padding=2, dilation=3)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(4, 6, 50)]


def get_init_inputs():
    return []
