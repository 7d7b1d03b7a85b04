"""A float16 product with a bias and a sigmoid."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 24).half()

    def forward(self, x):
        return torch.sigmoid(self.fc(x))


def get_inputs():
    return [torch.randn(16, 32, dtype=torch.float16)]


def get_init_inputs():
    return []
