"""A post-norm encoder sublayer with nn.MultiheadAttention (sequence-first): attention, residual, LayerNorm."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        return self.norm(x + y)


def get_inputs():
    return [torch.randn(6, 3, 16)]


def get_init_inputs():
    return []
