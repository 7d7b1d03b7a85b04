"""A ResNeXt block (eval): 1x1, grouped 3x3 (cardinality 4), 1x1, BN after each, identity residual, ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels=16, width=8, cardinality=4):
        super().__init__()
        self.conv_reduce = nn.Conv2d(channels, width, 1, bias=False)
        self.bn_reduce = nn.BatchNorm2d(width)
        self.conv_conv = nn.Conv2d(width, width, 3, padding=1, groups=cardinality, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.conv_expand = nn.Conv2d(width, channels, 1, bias=False)
        self.bn_expand = nn.BatchNorm2d(channels)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        self.eval()

    def forward(self, x):
        b = F.relu(self.bn_reduce(self.conv_reduce(x)), inplace=True)
        b = F.relu(self.bn(self.conv_conv(b)), inplace=True)
        b = self.bn_expand(self.conv_expand(b))
        return F.relu(x + b, inplace=True)


def get_inputs():
    return [torch.randn(2, 16, 6, 6)]


def get_init_inputs():
    return []
