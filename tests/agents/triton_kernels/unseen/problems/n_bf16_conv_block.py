"""A bfloat16 conv block in eval mode: conv-BN-ReLU, depthwise conv-BN-ReLU6, 1x1 conv, residual."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 3, padding=1, groups=c, bias=False), nn.BatchNorm2d(c), nn.ReLU6(inplace=True),
            nn.Conv2d(c, c, 1),
        )
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        self.to(torch.bfloat16)
        self.eval()

    def forward(self, x):
        return x + self.block(x)


def get_inputs():
    return [torch.randn(2, 8, 8, 8, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
