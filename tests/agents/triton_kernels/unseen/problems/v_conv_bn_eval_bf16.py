"""bf16 Conv2d, BatchNorm (eval), SiLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3).to(torch.bfloat16)
        self.bn = nn.BatchNorm2d(8).to(torch.bfloat16)
        self.eval()

    def forward(self, x):
        return F.silu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(2, 3, 9, 9, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
