"""Hinge loss."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, p, t):
        return torch.mean(torch.clamp(1 - p * t, min=0))


def get_inputs():
    return [torch.randn(64, 1), torch.randint(0, 2, (64, 1)).float() * 2 - 1]


def get_init_inputs():
    return []
