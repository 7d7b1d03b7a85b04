"""A ShuffleNet v2 unit: chunk the channels in two, one half through 1x1-dw3x3-1x1, concatenate, shuffle."""
import torch
import torch.nn as nn


def channel_shuffle(x, groups):
    b, c, h, w = x.shape
    x = x.reshape(b, groups, c // groups, h, w)
    x = x.permute(0, 2, 1, 3, 4)
    return x.reshape(b, c, h, w)


class Model(nn.Module):
    def __init__(self, channels=16):
        super().__init__()
        half = channels // 2
        self.branch = nn.Sequential(
            nn.Conv2d(half, half, 1, bias=False),
            nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
            nn.Conv2d(half, half, 3, padding=1, groups=half, bias=False),
            nn.BatchNorm2d(half),
            nn.Conv2d(half, half, 1, bias=False),
            nn.BatchNorm2d(half),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        out = torch.cat((a, self.branch(b)), dim=1)
        return channel_shuffle(out, 2)


def get_inputs():
    return [torch.randn(2, 16, 6, 6)]


def get_init_inputs():
    return []
