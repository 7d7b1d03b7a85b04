"""bf16 BatchNorm3d, training."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm3d(4).to(torch.bfloat16)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(2, 4, 3, 4, 5, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
