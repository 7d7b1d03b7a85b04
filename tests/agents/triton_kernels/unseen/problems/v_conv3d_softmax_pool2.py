"""Conv3d, softmax over channels, two MaxPools."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3)
        self.p1 = nn.MaxPool3d(2)
        self.p2 = nn.MaxPool3d(2)

    def forward(self, x):
        return self.p2(self.p1(torch.softmax(self.conv(x), dim=1)))


def get_inputs():
    return [torch.randn(2, 3, 10, 10, 10)]


def get_init_inputs():
    return []
