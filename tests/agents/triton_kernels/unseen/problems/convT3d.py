"""ConvTranspose3d with stride, padding and output padding."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(4, 3, 3, stride=2, padding=1, output_padding=(1, 0, 1))

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(1, 4, 4, 5, 3)]


def get_init_inputs():
    return []
