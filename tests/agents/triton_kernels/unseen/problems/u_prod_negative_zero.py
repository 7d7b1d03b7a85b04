"""A product over values with zeros and negatives."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.prod(torch.relu(x) - 0.5, dim=1)


def get_inputs():
    return [torch.randn(8, 12)]


def get_init_inputs():
    return []
