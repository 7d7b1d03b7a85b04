"""A bf16 linear layer widened to float32."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 24).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.fc(x)).float() * 3.0


def get_inputs():
    return [torch.randn(16, 32, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
