"""A bfloat16 Conv2d."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(2, 4, 9, 9, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
