"""A depthwise Conv3d."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(4, 4, 3, padding=1, groups=4)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 4, 5, 6, 5)]


def get_init_inputs():
    return []
