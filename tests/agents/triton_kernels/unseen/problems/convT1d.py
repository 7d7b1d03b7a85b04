"""ConvTranspose1d with stride, padding, output padding, dilation."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose1d(6, 4, 3, stride=2, padding=1, output_padding=1, dilation=2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(3, 6, 17)]


def get_init_inputs():
    return []
