"""A linear layer, scaled, plus its own output."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, i, o, s):
        super().__init__()
        self.fc = nn.Linear(i, o)
        self.s = s

    def forward(self, x):
        x = self.fc(x)
        y = x.clone().detach()
        return x * self.s + y


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return [24, 40, 0.5]
