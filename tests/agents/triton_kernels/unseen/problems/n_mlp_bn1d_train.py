"""An MLP with BatchNorm1d in training mode between Linear layers, ReLU(inplace) and dropout 0, two heads (two outputs)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, din=20, hidden=32, a=5, b=3):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(din, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True), nn.Dropout(0.0),
                                   nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True))
        self.head_a = nn.Linear(hidden, a)
        self.head_b = nn.Linear(hidden, b)

    def forward(self, x):
        h = self.trunk(x)
        return self.head_a(h), torch.log_softmax(self.head_b(h), dim=1)


def get_inputs():
    return [torch.randn(8, 20)]


def get_init_inputs():
    return []
