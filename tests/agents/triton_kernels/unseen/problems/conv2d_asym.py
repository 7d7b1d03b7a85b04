"""Conv2d with an asymmetric kernel and padding, with bias."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 20, (3, 5), stride=(1, 2), padding=(1, 2))

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 3, 12, 14)]


def get_init_inputs():
    return []
