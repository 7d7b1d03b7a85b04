"""A bf16 grouped ConvTranspose1d."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose1d(4, 6, 4, stride=3, groups=2).to(torch.bfloat16)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 4, 11, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
