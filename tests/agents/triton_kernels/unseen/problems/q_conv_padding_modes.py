"""Convolutions padding circularly and by replication"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 6, 3, padding=1, padding_mode='circular')
        self.c2 = nn.Conv2d(6, 6, 3, padding=2, padding_mode='replicate', dilation=2)

    def forward(self, *xs):
        return self.c2(torch.relu(self.c1(xs[0])))


def get_inputs():
    return [torch.randn(2, 3, 9, 11)]


def get_init_inputs():
    return []
