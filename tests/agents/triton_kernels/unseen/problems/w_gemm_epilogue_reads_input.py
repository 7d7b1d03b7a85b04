"""A product whose epilogue reads one of its factors."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, a, b):
        return torch.mm(a, b) + a


def get_inputs():
    return [torch.randn(20, 20), torch.randn(20, 20)]


def get_init_inputs():
    return []
