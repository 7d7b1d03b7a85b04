"""A MobileNet v3 block (training-mode BN): 1x1 expand with Hardswish, depthwise 3x3 stride 2, SE with ReLU and Hardsigmoid, 1x1 project."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class SqueezeExcite(nn.Module):
    def __init__(self, c, squeeze):
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.relu(self.fc1(s), inplace=True)
        return x * F.hardsigmoid(self.fc2(s), inplace=True)


class Model(nn.Module):
    def __init__(self, cin=8, expanded=24, cout=12):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(cin, expanded, 1, bias=False), nn.BatchNorm2d(expanded), nn.Hardswish(inplace=True))
        self.dw = nn.Sequential(nn.Conv2d(expanded, expanded, 3, 2, 1, groups=expanded, bias=False), nn.BatchNorm2d(expanded), nn.Hardswish(inplace=True))
        self.se = SqueezeExcite(expanded, 8)
        self.project = nn.Sequential(nn.Conv2d(expanded, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return self.project(self.se(self.dw(self.expand(x))))


def get_inputs():
    return [torch.randn(2, 8, 10, 10)]


def get_init_inputs():
    return []
