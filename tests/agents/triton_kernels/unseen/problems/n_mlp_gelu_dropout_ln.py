"""An MLP block: Linear, GELU, Dropout(p=0), Linear, then a residual and LayerNorm."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim=32, hidden=96):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.0)
        self.fc2 = nn.Linear(hidden, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        y = self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))
        return self.norm(x + y)


def get_inputs():
    return [torch.randn(3, 10, 32)]


def get_init_inputs():
    return []
