"""An EfficientNet stem and head (training BN): conv stride 2 + BN + SiLU(inplace), an MBConv without expansion (depthwise,
SE via flatten and Linear layers, project), then 1x1 conv head + BN + SiLU, global pool, dropout 0, Linear."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, classes=6):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.SiLU(inplace=True))
        self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8), nn.SiLU(inplace=True))
        self.se1 = nn.Linear(8, 2)
        self.se2 = nn.Linear(2, 8)
        self.project = nn.Sequential(nn.Conv2d(8, 8, 1, bias=False), nn.BatchNorm2d(8))
        self.head = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16), nn.SiLU(inplace=True))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x)
        s = F.adaptive_avg_pool2d(y, 1).flatten(1)
        s = torch.sigmoid(self.se2(F.silu(self.se1(s))))
        y = self.project(y * s[:, :, None, None])
        x = self.head(x + y)
        x = F.dropout(F.adaptive_avg_pool2d(x, 1).flatten(1), p=0.0, training=self.training)
        return self.fc(x)


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]


def get_init_inputs():
    return []
