"""A temporal conv net block: dilated causal conv1d (padded both sides, the tail chomped by a slice and .contiguous()), ReLU, dropout 0, twice; a 1x1 downsample residual."""
import torch
import torch.nn as nn


class Chomp1d(nn.Module):
    def __init__(self, chomp):
        super().__init__()
        self.chomp = chomp

    def forward(self, x):
        return x[:, :, : -self.chomp].contiguous()


class Model(nn.Module):
    def __init__(self, cin=4, cout=8, k=3, dilation=2):
        super().__init__()
        pad = (k - 1) * dilation
        self.net = nn.Sequential(
            nn.Conv1d(cin, cout, k, padding=pad, dilation=dilation), Chomp1d(pad), nn.ReLU(), nn.Dropout(0.0),
            nn.Conv1d(cout, cout, k, padding=pad, dilation=dilation), Chomp1d(pad), nn.ReLU(), nn.Dropout(0.0),
        )
        self.downsample = nn.Conv1d(cin, cout, 1)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.net(x) + self.downsample(x))


def get_inputs():
    return [torch.randn(2, 4, 20)]


def get_init_inputs():
    return []
