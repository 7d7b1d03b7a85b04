"""A deep MLP with BatchNorm in training mode on a small batch: every layer amplifies rounding,
so its float32 output lies about the float32 tolerance's width from its own float64 run."""
import torch
import torch.nn as nn

DEPTH, WIDTH, BATCH = 40, 32, 8


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(*(nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.BatchNorm1d(WIDTH), nn.Tanh()) for _ in range(DEPTH)))

    def forward(self, x):
        return self.layers(x)


def get_inputs():
    return [torch.randn(BATCH, WIDTH)]


def get_init_inputs():
    return []
