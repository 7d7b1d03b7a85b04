"""A ShuffleNet unit: grouped 1x1 conv, BN, ReLU, channel shuffle (view/transpose/contiguous/view), depthwise 3x3, BN, grouped 1x1, BN, residual, ReLU."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ChannelShuffle(nn.Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = groups

    def forward(self, x):
        n, c, h, w = x.size()
        x = x.view(n, self.groups, c // self.groups, h, w)
        x = x.transpose(1, 2).contiguous()
        return x.view(n, -1, h, w)


class Model(nn.Module):
    def __init__(self, channels=12, groups=3):
        super().__init__()
        mid = channels // 4 * 3
        self.conv1 = nn.Conv2d(channels, mid, 1, groups=groups, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.shuffle = ChannelShuffle(groups)
        self.conv2 = nn.Conv2d(mid, mid, 3, padding=1, groups=mid, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, channels, 1, groups=groups, bias=False)
        self.bn3 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.shuffle(out)
        out = self.bn2(self.conv2(out))
        out = F.relu(self.bn3(self.conv3(out)))
        out += x
        return out


def get_inputs():
    return [torch.randn(2, 12, 8, 8)]


def get_init_inputs():
    return []
