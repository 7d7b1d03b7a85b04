"""ConvTranspose3d, BatchNorm (training), two AvgPools."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm3d(4)

    def forward(self, x):
        x = self.bn(self.conv(x))
        return F.avg_pool3d(F.avg_pool3d(x, 2), 2)


def get_inputs():
    return [torch.randn(2, 3, 4, 5, 4)]


def get_init_inputs():
    return []
