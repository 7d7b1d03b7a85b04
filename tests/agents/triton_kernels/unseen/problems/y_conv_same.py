"""Conv2d with 'same' padding."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, (3, 4), padding='same')

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(2, 3, 9, 8)]


def get_init_inputs():
    return []
