"""PReLU with a parameter per channel after a conv"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.act = nn.PReLU(8, init=0.2)

    def forward(self, *xs):
        return self.act(self.conv(xs[0]))


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]


def get_init_inputs():
    return []
