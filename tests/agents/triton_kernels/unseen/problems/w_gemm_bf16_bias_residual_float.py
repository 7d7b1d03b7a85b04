"""bf16 linear with residual, then widened and normalised."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 32).to(torch.bfloat16)

    def forward(self, x):
        y = self.fc(x) + x
        return F.layer_norm(y.float(), (32,))


def get_inputs():
    return [torch.randn(8, 32, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
