"""MaxPool3d in ceil mode."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.max_pool3d(x, 2, stride=2, ceil_mode=True)


def get_inputs():
    return [torch.randn(2, 3, 5, 7, 6)]


def get_init_inputs():
    return []
