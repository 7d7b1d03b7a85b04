"""Min over the last dim, keepdim."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return torch.amin(x, dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(6, 5, 41)]


def get_init_inputs():
    return []
