"""float16 arithmetic cast to bfloat16 and back."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, x):
        return (torch.exp(x) * 1.5).to(torch.bfloat16).float()


def get_inputs():
    return [torch.randn(8, 64, dtype=torch.float16)]


def get_init_inputs():
    return []
