"""A long bf16 log-softmax over a 1-D input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return torch.log_softmax(x, dim=0)


def get_inputs():
    return [torch.randn(40000, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
