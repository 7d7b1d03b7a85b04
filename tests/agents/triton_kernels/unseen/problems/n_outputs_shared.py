"""An encoder returning its input unchanged beside its features twice (the same tensor in two output slots), a
detached copy, and the features' channel-mean as a buffer-like side output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d=10):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        f = self.ln(torch.sigmoid(self.fc(x)))
        return x, f, f, f.detach(), f.mean(-1)


def get_inputs():
    return [torch.randn(3, 4, 10)]


def get_init_inputs():
    return []
