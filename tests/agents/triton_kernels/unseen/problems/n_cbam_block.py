"""A CBAM block: channel attention from average- and max-pooled features through one shared MLP (sigmoid of the sum),
then spatial attention from the channel mean and max concatenated, a 7x7 conv and sigmoid."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=16, r=4):
        super().__init__()
        self.mlp = nn.Sequential(nn.Conv2d(c, c // r, 1, bias=False), nn.ReLU(), nn.Conv2d(c // r, c, 1, bias=False))
        self.spatial = nn.Conv2d(2, 1, 7, padding=3, bias=False)

    def forward(self, x):
        avg = torch.mean(x, dim=(2, 3), keepdim=True)
        mx = torch.amax(x, dim=(2, 3), keepdim=True)
        x = x * torch.sigmoid(self.mlp(avg) + self.mlp(mx))
        s = torch.cat([x.mean(dim=1, keepdim=True), x.max(dim=1, keepdim=True)[0]], dim=1)
        return x * torch.sigmoid(self.spatial(s))


def get_inputs():
    return [torch.randn(2, 16, 8, 8)]


def get_init_inputs():
    return []
