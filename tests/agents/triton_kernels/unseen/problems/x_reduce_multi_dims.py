"""Mean over dims (1, 2) keepdim, and a logsumexp over two dims."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.mean(x, dim=(1, 2), keepdim=True), torch.logsumexp(x, dim=(2, 3))


def get_inputs():
    return [torch.randn(3, 4, 5, 6)]


def get_init_inputs():
    return []
