"""ConvTranspose3d, LeakyReLU, multiply, LeakyReLU, MaxPool."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.m = nn.Parameter(torch.randn(4, 1, 1, 1))

    def forward(self, x):
        x = F.leaky_relu(self.conv(x), 0.2) * self.m
        return F.max_pool3d(F.leaky_relu(x, 0.2), 2)


def get_inputs():
    return [torch.randn(1, 3, 3, 4, 3)]


def get_init_inputs():
    return []
