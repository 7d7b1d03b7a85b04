"""A ResNet bottleneck (1x1, 3x3, 1x1, expansion 4) in eval mode with a projection shortcut."""
import torch
import torch.nn as nn


class Model(nn.Module):
    expansion = 4

    def __init__(self, cin=8, planes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut = nn.Sequential(nn.Conv2d(cin, planes * self.expansion, 1, bias=False), nn.BatchNorm2d(planes * self.expansion))
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.6, 1.4)
        self.eval()

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += self.shortcut(x)
        out = self.relu(out)
        return out


def get_inputs():
    return [torch.randn(2, 8, 6, 6)]


def get_init_inputs():
    return []
