"""A bf16 LayerNorm widened to float32."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(64).to(torch.bfloat16)

    def forward(self, x):
        return self.ln(x).float() - 0.5


def get_inputs():
    return [torch.randn(8, 64, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
