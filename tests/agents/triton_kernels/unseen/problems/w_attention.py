"""Scaled dot-product attention."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        pass

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


def get_inputs():
    return [torch.randn(2, 3, 24, 8), torch.randn(2, 3, 20, 8), torch.randn(2, 3, 20, 12)]


def get_init_inputs():
    return []
