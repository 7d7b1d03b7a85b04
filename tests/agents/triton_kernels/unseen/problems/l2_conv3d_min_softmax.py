"""Conv3d, min over depth, softmax over channels."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3)

    def forward(self, x):
        x = self.conv(x)
        x = torch.min(x, dim=2)[0]
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(2, 3, 6, 8, 8)]


def get_init_inputs():
    return []
