"""Cheat: the products of ``workloads/deep_bn_mlp.py`` at TF32's precision (operands rounded to
10 mantissa bits, as the tensor cores read them), with the precision flags left as pinned. Caught:
``incorrect``, even where the deep network widens the float32 tolerance (``calibration.py``)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

DEPTH, WIDTH = 40, 32


def _tf32(t):
    bits = t.contiguous().view(torch.int32)
    return ((bits + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH), nn.Tanh()) for _ in range(DEPTH)))

    def forward(self, x):
        for linear, norm, act in self.layers:
            x = act(norm(F.linear(_tf32(x), _tf32(linear.weight), linear.bias)))
        return x
