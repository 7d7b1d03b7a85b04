"""ConvTranspose2d, bias, clamp, scale, clamp, divide."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(3, 8, 3, stride=2, padding=1, output_padding=1)
        self.bias = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        x = self.conv(x) + self.bias
        x = torch.clamp(x, 0.0, 1.0) * 2.0
        return torch.clamp(x, 0.0, 1.0) / 2.0


def get_inputs():
    return [torch.randn(2, 3, 6, 5)]


def get_init_inputs():
    return []
