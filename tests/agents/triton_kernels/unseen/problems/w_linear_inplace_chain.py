"""Linear then in-place activations."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 24)

    def forward(self, x):
        y = self.fc(x)
        y.mul_(2.0)
        F.relu(y, inplace=True)
        return y


def get_inputs():
    return [torch.randn(10, 16)]


def get_init_inputs():
    return []
