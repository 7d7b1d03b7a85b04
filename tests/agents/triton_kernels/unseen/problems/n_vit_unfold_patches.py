"""ViT patch embedding written with unfold/reshape/permute and a Linear, then a transformer encoder layer by hand (eval)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, patch=4, channels=3, dim=24, heads=3):
        super().__init__()
        self.patch = patch
        self.proj = nn.Linear(channels * patch * patch, dim)
        self.pos = nn.Parameter(torch.randn(1, 16, dim) * 0.1)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, 2 * dim)
        self.ff2 = nn.Linear(2 * dim, dim)
        self.heads = heads
        self.eval()

    def forward(self, img):
        b, c, h, w = img.shape
        p = self.patch
        x = img.unfold(2, p, p).unfold(3, p, p)
        x = x.permute(0, 2, 3, 1, 4, 5).reshape(b, (h // p) * (w // p), c * p * p)
        x = self.proj(x) + self.pos
        n, d = x.shape[1], x.shape[2]
        qkv = self.qkv(self.ln1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        attn = attn.softmax(dim=-1)
        y = (attn @ v).transpose(1, 2).reshape(b, n, d)
        x = x + self.out(y)
        x = x + self.ff2(F.gelu(self.ff1(self.ln2(x))))
        return x


def get_inputs():
    return [torch.randn(2, 3, 16, 16)]


def get_init_inputs():
    return []
