"""A batched product."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, a, b):
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(4, 20, 28), torch.randn(4, 28, 18)]


def get_init_inputs():
    return []
