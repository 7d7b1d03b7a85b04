"""Frobenius-norm normalisation."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return x / torch.norm(x, p='fro')


def get_inputs():
    return [torch.randn(4, 8, 10, 6)]


def get_init_inputs():
    return []
