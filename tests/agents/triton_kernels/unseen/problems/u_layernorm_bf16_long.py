"""A bf16 LayerNorm over long rows with an epilogue."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(20000).to(torch.bfloat16)

    def forward(self, x):
        return torch.relu(self.ln(x))


def get_inputs():
    return [torch.randn(3, 20000, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
