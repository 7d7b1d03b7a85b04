"""Conv2d of a channels-last input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3)

    def forward(self, x):
        return torch.sigmoid(self.conv(x))


def get_inputs():
    return [torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last)]


def get_init_inputs():
    return []
