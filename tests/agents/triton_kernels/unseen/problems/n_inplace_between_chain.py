"""A gated block whose activation is scaled in place after a first read of it: t = tanh(h), then h *= 0.5 in
place, then t + h (the first read must see h before the write), and a residual of the input."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        h = self.fc(x)
        t = torch.tanh(h)
        h.mul_(0.5)
        return t + h + x


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
