"""A transformer decoder layer (post-norm): masked self-attention through F.scaled_dot_product_attention (is_causal),
cross-attention by hand over a memory, FFN with ReLU; LayerNorm after each residual."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, dim=24, heads=3):
        super().__init__()
        self.heads = heads
        self.sa_qkv = nn.Linear(dim, 3 * dim)
        self.sa_out = nn.Linear(dim, dim)
        self.ca_q = nn.Linear(dim, dim)
        self.ca_kv = nn.Linear(dim, 2 * dim)
        self.ca_out = nn.Linear(dim, dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, dim))
        self.n1, self.n2, self.n3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def heads_of(self, t):
        b, n, c = t.shape
        return t.view(b, n, self.heads, c // self.heads).transpose(1, 2)

    def merge(self, t):
        b, h, n, d = t.shape
        return t.transpose(1, 2).reshape(b, n, h * d)

    def forward(self, x, memory):
        q, k, v = self.sa_qkv(x).chunk(3, dim=-1)
        y = F.scaled_dot_product_attention(self.heads_of(q), self.heads_of(k), self.heads_of(v), is_causal=True)
        x = self.n1(x + self.sa_out(self.merge(y)))
        q = self.heads_of(self.ca_q(x))
        k, v = (self.heads_of(t) for t in self.ca_kv(memory).chunk(2, dim=-1))
        w = (q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5).softmax(-1)
        x = self.n2(x + self.ca_out(self.merge(w @ v)))
        return self.n3(x + self.ff(x))


def get_inputs():
    return [torch.randn(2, 7, 24), torch.randn(2, 11, 24)]


def get_init_inputs():
    return []
