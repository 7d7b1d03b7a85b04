"""A VGG-BN stage in training mode: conv-BN-ReLU(inplace) x2, max pool, then a global average by mean(dim=[2, 3]) and a Linear."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin=3, c=8, classes=5):
        super().__init__()
        self.stage = nn.Sequential(
            nn.Conv2d(cin, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=2, stride=2),
        )
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        return self.fc(self.stage(x).mean(dim=[2, 3]))


def get_inputs():
    return [torch.randn(3, 3, 8, 8)]


def get_init_inputs():
    return []
