"""A bf16 depthwise Conv2d with a chain."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1, groups=4).to(torch.bfloat16)

    def forward(self, x):
        return F.relu6(self.conv(x))


def get_inputs():
    return [torch.randn(2, 4, 9, 8, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
