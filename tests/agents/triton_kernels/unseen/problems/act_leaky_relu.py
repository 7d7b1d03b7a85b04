"""LeakyReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return F.leaky_relu(x, negative_slope=0.01)


def get_inputs():
    return [torch.randn(16, 300)]


def get_init_inputs():
    return []
