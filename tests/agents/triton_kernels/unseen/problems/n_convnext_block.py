"""A ConvNeXt block: depthwise 7x7, permute to channels-last, LayerNorm, Linear 4x, GELU, Linear, layer scale, permute back, residual."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim=12, layer_scale=1e-1):
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(layer_scale * torch.ones(dim))

    def forward(self, x):
        shortcut = x
        x = self.dwconv(x)
        x = x.permute(0, 2, 3, 1)
        x = self.pwconv2(self.act(self.pwconv1(self.norm(x))))
        x = self.gamma * x
        x = x.permute(0, 3, 1, 2)
        return shortcut + x


def get_inputs():
    return [torch.randn(2, 12, 8, 8)]


def get_init_inputs():
    return []
