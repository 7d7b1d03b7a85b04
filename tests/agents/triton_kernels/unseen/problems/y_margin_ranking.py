"""Margin ranking loss."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b, t):
        return F.margin_ranking_loss(a, b, t, margin=0.5)


def get_inputs():
    return [torch.randn(32), torch.randn(32), torch.randint(0, 2, (32,)).float() * 2 - 1]


def get_init_inputs():
    return []
