"""ConvTranspose2d, global average pool, logsumexp, multiply."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(4, 8, 3, stride=2)
        self.bias = nn.Parameter(torch.randn(8, 1, 1))

    def forward(self, x):
        x = self.conv(x)
        x = torch.mean(x, dim=(2, 3), keepdim=True)
        x = x + self.bias
        x = torch.logsumexp(x, dim=1, keepdim=True)
        return x * 10.0


def get_inputs():
    return [torch.randn(2, 4, 6, 6)]


def get_init_inputs():
    return []
