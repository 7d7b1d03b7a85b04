"""nn.TransformerEncoder (two post-norm layers, GELU, dropout 0, batch-first) in training mode, and a mean over tokens."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d=16, heads=2, layers=2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=32, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, x):
        return self.encoder(x).mean(dim=1)


def get_inputs():
    return [torch.randn(2, 6, 16)]


def get_init_inputs():
    return []
