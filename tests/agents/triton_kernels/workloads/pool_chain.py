"""Pooling of every kind the kernel does, each followed by elementwise work: a padded, ceil-mode
2-D max pool, a dilated 1-D max pool (traced as a 2-D one), a 3-D average pool that does not
count padding, and a max pool whose indices are read (left to PyTorch)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool2 = nn.MaxPool2d(3, 2, 1, ceil_mode=True)
        self.pool1 = nn.MaxPool1d(4, 1, 2, dilation=3)
        self.pool3 = nn.AvgPool3d((2, 3, 3), (2, 2, 1), (1, 1, 0), count_include_pad=False)

    def forward(self, x, s, v):
        a = torch.relu(self.pool2(x)) * 2.0
        b = torch.sigmoid(self.pool1(s))
        c = self.pool3(v) - 0.5
        values, indices = F.max_pool2d(x, 2, return_indices=True)
        return a, b, c, values + indices.float()


def get_inputs():
    return [torch.randn(2, 3, 11, 13), torch.randn(2, 4, 30), torch.randn(1, 2, 5, 7, 9)]


def get_init_inputs():
    return []
