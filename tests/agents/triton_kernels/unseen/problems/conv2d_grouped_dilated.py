"""Conv2d with groups, stride, padding, dilation, no bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 12, 3, stride=2, padding=2, dilation=2, groups=4, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 8, 15, 13)]


def get_init_inputs():
    return []
