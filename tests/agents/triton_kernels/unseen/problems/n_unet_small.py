"""A two-level U-Net: double conv (BN training, ReLU), max pool, double conv, transposed-conv upsampling, skip concatenation, double conv, 1x1 head."""
import torch
import torch.nn as nn


def double_conv(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class Model(nn.Module):
    def __init__(self, cin=3, base=4, classes=2):
        super().__init__()
        self.inc = double_conv(cin, base)
        self.pool = nn.MaxPool2d(2)
        self.down = double_conv(base, base * 2)
        self.up = nn.ConvTranspose2d(base * 2, base, kernel_size=2, stride=2)
        self.dec = double_conv(base * 2, base)
        self.head = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down(self.pool(x1))
        u = self.up(x2)
        return self.head(self.dec(torch.cat([x1, u], dim=1)))


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
