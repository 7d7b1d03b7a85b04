"""A bf16 AvgPool2d with a chain."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.relu(F.avg_pool2d(x, 3, stride=1, padding=1)) * 2


def get_inputs():
    return [torch.randn(2, 3, 8, 9, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
