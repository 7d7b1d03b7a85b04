"""DenseNet bottleneck layers and a transition (eval): BN-ReLU-1x1-BN-ReLU-3x3, concatenation, BN-ReLU-1x1, avg pool 2."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin=8, growth=4, bn_size=2):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)
        self.tnorm = nn.BatchNorm2d(cin + growth)
        self.tconv = nn.Conv2d(cin + growth, (cin + growth) // 2, 1, bias=False)
        self.pool = nn.AvgPool2d(2, 2)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, x):
        out = self.conv1(F.relu(self.norm1(x)))
        out = self.conv2(F.relu(self.norm2(out)))
        x = torch.cat([x, out], dim=1)
        return self.pool(self.tconv(F.relu(self.tnorm(x))))


def get_inputs():
    return [torch.randn(2, 8, 8, 8)]


def get_init_inputs():
    return []
