"""A ResNet-101-shaped network (bottleneck blocks 3, 4, 23, 3; narrow channels) in training mode
on a batch of four 64x64 images: deep enough that its float32 output is about 1e-4 from its own
float64 run (``benchmarks/tolerance_calibration.py``)."""
import torch
import torch.nn as nn


class Bottleneck(nn.Module):
    def __init__(self, c, mid, stride=1, down=False):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, mid * 4, 1, bias=False), nn.BatchNorm2d(mid * 4)
        self.relu = nn.ReLU(inplace=True)
        self.down = nn.Sequential(nn.Conv2d(c, mid * 4, 1, stride, bias=False), nn.BatchNorm2d(mid * 4)) if down else None

    def forward(self, x):
        identity = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class Model(nn.Module):
    def __init__(self, blocks=(3, 4, 23, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        layers, c = [], 8
        for i, n in enumerate(blocks):
            mid = 4 * 2**i
            for j in range(n):
                layers.append(Bottleneck(c, mid, 2 if (j == 0 and i > 0) else 1, down=(j == 0)))
                c = mid * 4
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(c, 10)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


def get_inputs():
    return [torch.randn(4, 3, 64, 64)]


def get_init_inputs():
    return []
