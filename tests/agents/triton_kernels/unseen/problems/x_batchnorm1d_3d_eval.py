"""BatchNorm1d of (N, C, L) in eval."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(6)
        self.bn.running_mean.uniform_(-1, 1)
        self.bn.running_var.uniform_(0.5, 2)
        self.eval()

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(4, 6, 9)]


def get_init_inputs():
    return []
