"""Softmax over the flattened spatial positions of each channel, then expected coordinates"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, *xs):
        x = xs[0]
        b, c, h, w = x.shape
        p = torch.softmax(x.reshape(b, c, h * w), dim=-1).reshape(b, c, h, w)
        ys = torch.linspace(-1, 1, h).view(1, 1, h, 1)
        xs_ = torch.linspace(-1, 1, w).view(1, 1, 1, w)
        return torch.stack([(p * ys).sum((2, 3)), (p * xs_).sum((2, 3))], -1)


def get_inputs():
    return [torch.randn(2, 5, 6, 7)]


def get_init_inputs():
    return []
