"""Attention with an ALiBi bias buffer added by torch.baddbmm (beta 1, alpha the scale), a causal mask from a bool buffer by masked_fill, softmax, bmm."""
import math

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim=16, heads=4, T=8):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)])
        dist = torch.arange(T)[None, :] - torch.arange(T)[:, None]
        bias = slopes[:, None, None] * dist[None].float()
        self.register_buffer("bias", bias)
        self.register_buffer("future", dist > 0)

    def forward(self, x):
        B, T, C = x.shape
        h = self.heads
        q, k, v = self.qkv(x).view(B, T, 3, h, C // h).permute(2, 0, 3, 1, 4).reshape(3, B * h, T, C // h)
        bias = self.bias.unsqueeze(0).expand(B, h, T, T).reshape(B * h, T, T)
        att = torch.baddbmm(bias, q, k.transpose(1, 2), beta=1.0, alpha=1.0 / math.sqrt(C // h))
        att = att.view(B, h, T, T).masked_fill(self.future, float("-inf")).view(B * h, T, T)
        y = torch.bmm(att.softmax(-1), v)
        return y.view(B, h, T, C // h).transpose(1, 2).reshape(B, T, C)


def get_inputs():
    return [torch.randn(2, 8, 16)]


def get_init_inputs():
    return []
