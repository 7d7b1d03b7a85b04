"""A sentence encoder head: token features through Linear-ReLU, a bool padding mask (input) applied with
masked_fill and a float cast, masked mean over tokens, L2-normalised, and a max over tokens with -inf at padding."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.proj = nn.Linear(d, d)

    def forward(self, x, mask):
        h = torch.relu(self.proj(x))
        m = mask.unsqueeze(-1).float()
        mean = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
        mx = h.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1).values
        return nn.functional.normalize(mean, dim=-1), mx


def get_inputs():
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[0, 5:] = False
    mask[2, 2:] = False
    return [torch.randn(3, 7, 16), mask]


def get_init_inputs():
    return []
