"""A tiny GPT language model: token embedding of integer ids plus a position embedding indexed by
torch.arange, one pre-norm block with causal attention (mask made in forward by torch.triu), a tied
LM head, and the cross-entropy loss against shifted targets; returns the logits and the loss."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, vocab=40, dim=24, heads=3, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.ln_f = nn.LayerNorm(dim)
        self.heads = heads

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.tok(idx) + self.pos(pos)[None]
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(h.shape[-1], dim=-1)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        att = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        mask = torch.triu(torch.ones(T, T, device=idx.device), diagonal=1).bool()
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).contiguous().view(B, T, -1))
        x = x + self.ff(self.ln2(x))
        logits = self.ln_f(x) @ self.tok.weight.t()
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1))
        return logits, loss


def get_inputs():
    return [torch.randint(0, 40, (2, 10)), torch.randint(0, 40, (2, 10))]


def get_init_inputs():
    return []
