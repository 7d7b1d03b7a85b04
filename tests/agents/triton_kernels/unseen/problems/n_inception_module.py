"""A GoogLeNet inception module: 1x1, 1x1->3x3, 1x1->5x5 and 3x3-maxpool->1x1 branches concatenated on channels."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, cin=8, c1=4, c3r=4, c3=6, c5r=2, c5=4, pool_proj=4):
        super().__init__()
        self.branch1x1 = nn.Conv2d(cin, c1, 1)
        self.branch3x3 = nn.Sequential(nn.Conv2d(cin, c3r, 1), nn.Conv2d(c3r, c3, 3, padding=1))
        self.branch5x5 = nn.Sequential(nn.Conv2d(cin, c5r, 1), nn.Conv2d(c5r, c5, 5, padding=2))
        self.branch_pool = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1), nn.Conv2d(cin, pool_proj, 1))

    def forward(self, x):
        outputs = [self.branch1x1(x), self.branch3x3(x), self.branch5x5(x), self.branch_pool(x)]
        return torch.cat(outputs, 1)


def get_inputs():
    return [torch.randn(2, 8, 7, 7)]


def get_init_inputs():
    return []
