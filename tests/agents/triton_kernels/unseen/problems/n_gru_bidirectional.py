"""A bidirectional two-layer GRU (sequence-first) with an initial state buffer; returns the output and h_n."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size=6, hidden_size=8, num_layers=2, batch=2):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers, bias=True, batch_first=False, dropout=0.0, bidirectional=True)
        self.register_buffer("h0", torch.randn(num_layers * 2, batch, hidden_size))

    def forward(self, x):
        output, h_n = self.gru(x, self.h0)
        return output, h_n


def get_inputs():
    return [torch.randn(5, 2, 6)]


def get_init_inputs():
    return []
