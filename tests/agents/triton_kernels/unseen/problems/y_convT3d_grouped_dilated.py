"""ConvTranspose3d with groups and dilation."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(4, 4, 2, stride=2, dilation=2, groups=2, output_padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(1, 4, 3, 4, 3)]


def get_init_inputs():
    return []
