"""AvgPool3d not counting padding."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.avg_pool3d(x, 3, stride=2, padding=1, count_include_pad=False)


def get_inputs():
    return [torch.randn(2, 3, 7, 6, 5)]


def get_init_inputs():
    return []
