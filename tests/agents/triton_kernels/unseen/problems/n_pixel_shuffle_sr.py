"""A super-resolution tail: conv, PixelShuffle(2), PReLU, conv, then a global residual of the bicubic-free nearest upsample."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c=3, feats=8):
        super().__init__()
        self.head = nn.Conv2d(c, feats, 3, padding=1)
        self.up = nn.Conv2d(feats, feats * 4, 3, padding=1)
        self.shuffle = nn.PixelShuffle(2)
        self.act = nn.PReLU(feats)
        self.tail = nn.Conv2d(feats, c, 3, padding=1)

    def forward(self, x):
        h = self.act(self.shuffle(self.up(self.head(x))))
        return self.tail(h) + F.interpolate(x, scale_factor=2, mode="nearest")


def get_inputs():
    return [torch.randn(2, 3, 6, 6)]


def get_init_inputs():
    return []
