"""An MLP-Mixer block: token mixing (LayerNorm, transpose, MLP over patches, transpose back, residual) and channel mixing."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, patches=16, dim=12, tok_hidden=24, ch_hidden=32):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(patches, tok_hidden), nn.GELU(), nn.Linear(tok_hidden, patches))
        self.norm2 = nn.LayerNorm(dim)
        self.ch = nn.Sequential(nn.Linear(dim, ch_hidden), nn.GELU(), nn.Linear(ch_hidden, dim))

    def forward(self, x):
        x = x + self.tok(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.norm2(x))


def get_inputs():
    return [torch.randn(2, 16, 12)]


def get_init_inputs():
    return []
