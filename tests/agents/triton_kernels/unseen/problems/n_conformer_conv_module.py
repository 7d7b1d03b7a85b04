"""A Conformer convolution module: LayerNorm, pointwise Conv1d over the transposed sequence, GLU, depthwise Conv1d, BatchNorm1d (training), SiLU, pointwise Conv1d, dropout 0, residual."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, d=16, k=5):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.dw = nn.Conv1d(d, d, k, padding=k // 2, groups=d)
        self.bn = nn.BatchNorm1d(d)
        self.pw2 = nn.Conv1d(d, d, 1)
        self.drop = nn.Dropout(0.0)

    def forward(self, x):
        y = self.norm(x).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = F.silu(self.bn(self.dw(y)))
        y = self.drop(self.pw2(y)).transpose(1, 2)
        return x + y


def get_inputs():
    return [torch.randn(2, 12, 16)]


def get_init_inputs():
    return []
