"""L1, soft margin, Poisson NLL and Gaussian NLL losses"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, *xs):
        x, y, v = xs
        return (F.l1_loss(x, y) + F.soft_margin_loss(x, torch.sign(y)) + F.poisson_nll_loss(x, y.abs())
                + F.gaussian_nll_loss(x, y, v.abs() + 0.1))


def get_inputs():
    return [torch.randn(8, 12), torch.randn(8, 12), torch.randn(8, 12)]


def get_init_inputs():
    return []
