"""LayerNorm then Linear then residual."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(24)
        self.fc = nn.Linear(24, 24)

    def forward(self, x):
        return x + self.fc(self.ln(x))


def get_inputs():
    return [torch.randn(10, 24)]


def get_init_inputs():
    return []
