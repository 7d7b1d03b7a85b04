"""A squeeze-and-excitation residual block (training-mode BN): conv-BN-ReLU-conv-BN, SE (mean over H, W, Linear-ReLU-Linear-sigmoid, view and scale), residual, ReLU."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels=16, reduction=4):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.fc = nn.Sequential(nn.Linear(channels, channels // reduction, bias=False), nn.ReLU(inplace=True), nn.Linear(channels // reduction, channels, bias=False), nn.Sigmoid())

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        b, c, _, _ = out.size()
        y = out.mean(dim=(2, 3))
        y = self.fc(y).view(b, c, 1, 1)
        out = out * y.expand_as(out)
        return torch.relu(out + x)


def get_inputs():
    return [torch.randn(2, 16, 6, 6)]


def get_init_inputs():
    return []
