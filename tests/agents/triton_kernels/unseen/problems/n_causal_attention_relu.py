"""Causal attention without softmax: separate query/key/value Linears, the masked scores (a masked_fill
with -inf from a tril buffer) through ReLU, as some linear-attention variants do, heads merged by reshape."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, n_embd=24, n_head=3, max_seqlen=10):
        super().__init__()
        self.query = nn.Linear(n_embd, n_embd)
        self.key = nn.Linear(n_embd, n_embd)
        self.value = nn.Linear(n_embd, n_embd)
        self.register_buffer("keep", torch.tril(torch.ones(max_seqlen, max_seqlen, dtype=torch.bool)))
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        h, d = self.n_head, C // self.n_head
        q = self.query(x).reshape(B, T, h, d).permute(0, 2, 1, 3)
        k = self.key(x).reshape(B, T, h, d).permute(0, 2, 3, 1)
        v = self.value(x).reshape(B, T, h, d).permute(0, 2, 1, 3)
        att = torch.matmul(q, k) * d ** -0.5
        att = F.relu(att.masked_fill(~self.keep[:T, :T], float("-inf")))
        return torch.matmul(att, v).permute(0, 2, 1, 3).reshape(B, T, C)


def get_inputs():
    return [torch.randn(2, 10, 24)]


def get_init_inputs():
    return []
