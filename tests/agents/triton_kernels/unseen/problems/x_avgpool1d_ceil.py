"""AvgPool1d in ceil mode."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.avg_pool1d(x, 4, stride=3, ceil_mode=True)


def get_inputs():
    return [torch.randn(2, 3, 20)]


def get_init_inputs():
    return []
