"""A style-transfer residual block: reflection pad, conv, InstanceNorm (affine), ReLU, reflection pad, conv, InstanceNorm, residual."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.block = nn.Sequential(
            nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c, affine=True), nn.ReLU(True),
            nn.ReflectionPad2d(1), nn.Conv2d(c, c, 3), nn.InstanceNorm2d(c, affine=True),
        )

    def forward(self, x):
        return x + self.block(x)


def get_inputs():
    return [torch.randn(2, 8, 7, 7)]


def get_init_inputs():
    return []
