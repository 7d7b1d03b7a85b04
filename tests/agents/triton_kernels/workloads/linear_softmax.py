"""A linear layer, then a softmax over its rows: the GEMM stays with the library (and inductor),
the softmax is a kernel's; the scaled logits are added back, so the scale is an elementwise
kernel of its own (read twice, it cannot be the softmax's prologue)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x):
        y = self.fc(x) * 0.5
        return torch.softmax(y, dim=-1) + y


def get_inputs():
    return [torch.randn(16, 24)]


def get_init_inputs():
    return [24, 40]
