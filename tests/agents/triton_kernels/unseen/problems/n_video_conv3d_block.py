"""A video block: Conv3d, GroupNorm, GELU, a (2, 1, 1) temporal max pool, a factorised (1, 3, 3) then (3, 1, 1) conv pair, residual."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin=3, c=8):
        super().__init__()
        self.conv = nn.Conv3d(cin, c, 3, padding=1)
        self.gn = nn.GroupNorm(4, c)
        self.spatial = nn.Conv3d(c, c, (1, 3, 3), padding=(0, 1, 1))
        self.temporal = nn.Conv3d(c, c, (3, 1, 1), padding=(1, 0, 0))

    def forward(self, x):
        x = F.gelu(self.gn(self.conv(x)))
        x = F.max_pool3d(x, (2, 1, 1))
        return x + self.temporal(F.relu(self.spatial(x)))


def get_inputs():
    return [torch.randn(2, 3, 4, 6, 6)]


def get_init_inputs():
    return []
