"""A bfloat16 MLP: Linear-GELU-Linear-SiLU-Linear, parameters and input in bfloat16."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dims=(32, 64, 48, 16)):
        super().__init__()
        self.fc1 = nn.Linear(dims[0], dims[1])
        self.fc2 = nn.Linear(dims[1], dims[2])
        self.fc3 = nn.Linear(dims[2], dims[3])
        self.to(torch.bfloat16)

    def forward(self, x):
        return self.fc3(F.silu(self.fc2(F.gelu(self.fc1(x)))))


def get_inputs():
    return [torch.randn(6, 32, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
