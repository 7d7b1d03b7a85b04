"""Swin patch merging: strided slices of the (B, H, W, C) grid concatenated on channels, LayerNorm, a Linear without bias."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, resolution=8, dim=6):
        super().__init__()
        self.res = resolution
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        H = W = self.res
        B, L, C = x.shape
        x = x.view(B, H, W, C)
        x0 = x[:, 0::2, 0::2, :]
        x1 = x[:, 1::2, 0::2, :]
        x2 = x[:, 0::2, 1::2, :]
        x3 = x[:, 1::2, 1::2, :]
        x = torch.cat([x0, x1, x2, x3], -1).view(B, -1, 4 * C)
        return self.reduction(self.norm(x))


def get_inputs():
    return [torch.randn(2, 64, 6)]


def get_init_inputs():
    return []
