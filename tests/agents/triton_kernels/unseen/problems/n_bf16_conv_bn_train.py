"""A bfloat16 conv-BN-ReLU stack in training mode (batch statistics and running statistics in bfloat16 modules).

No residual: CPU PyTorch's bfloat16 BatchNorm is up to a bfloat16 ulp off the correctly rounded
result (kloom's kernel is not), and a residual's cancellation made that ulp exceed bfloat16's atol."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.to(torch.bfloat16)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out)


def get_inputs():
    return [torch.randn(2, 8, 6, 6, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
