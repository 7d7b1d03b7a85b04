"""A float32 MLP whose middle runs under torch.autocast (bfloat16 on the CPU), the output made float32 again, then LayerNorm."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.fc2(F.gelu(self.fc1(x)))
        return self.norm(x + y.float())


def get_inputs():
    return [torch.randn(4, 6, 32)]


def get_init_inputs():
    return []
