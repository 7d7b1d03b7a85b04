"""A SegNet stage: conv-BN(eval)-ReLU, max pool with indices, conv, max unpool with those indices, conv."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, c=6):
        super().__init__()
        self.enc = nn.Conv2d(3, c, 3, padding=1)
        self.bn = nn.BatchNorm2d(c)
        self.mid = nn.Conv2d(c, c, 3, padding=1)
        self.dec = nn.Conv2d(c, 2, 3, padding=1)
        self.eval()

    def forward(self, x):
        x = F.relu(self.bn(self.enc(x)))
        size = x.size()
        x, idx = F.max_pool2d(x, 2, 2, return_indices=True)
        x = self.mid(x)
        x = F.max_unpool2d(x, idx, 2, 2, output_size=size)
        return self.dec(x)


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
