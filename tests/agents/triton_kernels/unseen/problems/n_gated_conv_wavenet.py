"""WaveNet residual layers: dilated causal Conv1d via left F.pad, tanh * sigmoid gate from a split of the channels,
1x1 residual and skip convs, the skips summed over layers; returns the residual stream and the skip sum."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c=8, layers=3):
        super().__init__()
        self.dil = nn.ModuleList([nn.Conv1d(c, 2 * c, 2, dilation=2 ** i) for i in range(layers)])
        self.res = nn.ModuleList([nn.Conv1d(c, c, 1) for _ in range(layers)])
        self.skip = nn.ModuleList([nn.Conv1d(c, c, 1) for _ in range(layers)])

    def forward(self, x):
        skips = 0
        for i, (d, r, s) in enumerate(zip(self.dil, self.res, self.skip)):
            h = d(F.pad(x, (2 ** i, 0)))
            a, b = torch.split(h, h.shape[1] // 2, dim=1)
            z = torch.tanh(a) * torch.sigmoid(b)
            skips = skips + s(z)
            x = x + r(z)
        return x, F.relu(skips)


def get_inputs():
    return [torch.randn(2, 8, 16)]


def get_init_inputs():
    return []
