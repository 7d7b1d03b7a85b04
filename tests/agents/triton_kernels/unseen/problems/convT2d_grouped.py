"""ConvTranspose2d with groups and no bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 8, 7, 6)]


def get_init_inputs():
    return []
