"""A tiny ViT: patch embedding by a strided conv, flatten(2).transpose(1, 2), a class token concatenated,
position embeddings added, dropout 0, pre-norm encoder layers with nn.MultiheadAttention and a GELU MLP, head on the class token."""
import torch
import torch.nn as nn


class EncoderLayer(nn.Module):
    def __init__(self, dim, heads, mlp_ratio=2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=0.0, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, dim * mlp_ratio), nn.GELU(), nn.Dropout(0.0), nn.Linear(dim * mlp_ratio, dim), nn.Dropout(0.0))

    def forward(self, x):
        y = self.norm1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Model(nn.Module):
    def __init__(self, image_size=16, patch=4, channels=3, dim=32, depth=2, heads=4, num_classes=5):
        super().__init__()
        n = (image_size // patch) ** 2
        self.patch_embed = nn.Conv2d(channels, dim, kernel_size=patch, stride=patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.ModuleList([EncoderLayer(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, img):
        x = self.patch_embed(img).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1)
        x = self.dropout(x + self.pos_embed)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x)[:, 0])


def get_inputs():
    return [torch.randn(2, 3, 16, 16)]


def get_init_inputs():
    return []
