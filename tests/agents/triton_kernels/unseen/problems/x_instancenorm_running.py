"""InstanceNorm2d tracking running statistics (training)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = nn.InstanceNorm2d(4, track_running_stats=True)

    def forward(self, x):
        return self.n(x)


def get_inputs():
    return [torch.randn(3, 4, 6, 5)]


def get_init_inputs():
    return []
