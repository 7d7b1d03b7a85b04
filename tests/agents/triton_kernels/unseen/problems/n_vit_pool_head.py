"""A ViT classifier head: LayerNorm of the tokens, mean over the patch tokens (class token dropped by a slice), Linear-Tanh pre-logits, Linear."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim=32, num_classes=8):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pre_logits = nn.Sequential(nn.Linear(dim, dim), nn.Tanh())
        self.head = nn.Linear(dim, num_classes)

    def forward(self, tokens):
        x = self.norm(tokens)
        x = x[:, 1:].mean(dim=1)
        return self.head(self.pre_logits(x))


def get_inputs():
    return [torch.randn(3, 17, 32)]


def get_init_inputs():
    return []
