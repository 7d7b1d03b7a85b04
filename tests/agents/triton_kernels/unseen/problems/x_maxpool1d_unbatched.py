"""MaxPool1d of an unbatched input."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return F.max_pool1d(x, 3, stride=2)


def get_inputs():
    return [torch.randn(4, 21)]


def get_init_inputs():
    return []
