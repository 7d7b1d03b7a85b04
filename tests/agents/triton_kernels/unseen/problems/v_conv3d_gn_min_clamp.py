"""Conv3d, GroupNorm, min with a constant, clamp."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3)
        self.gn = nn.GroupNorm(4, 8)

    def forward(self, x):
        x = self.gn(self.conv(x))
        x = torch.min(x, torch.tensor(0.5))
        return torch.clamp(x, min=-0.5, max=1.0)


def get_inputs():
    return [torch.randn(2, 3, 6, 7, 6)]


def get_init_inputs():
    return []
