"""A head returning several views of one activation beside it: the tensor, its reshape, its transpose and a slice."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d=12):
        super().__init__()
        self.fc = nn.Linear(d, d)

    def forward(self, x):
        h = torch.relu(self.fc(x)) + 0.5
        return h, h.view(-1), h.t(), h[1:3]


def get_inputs():
    return [torch.randn(4, 12)]


def get_init_inputs():
    return []
