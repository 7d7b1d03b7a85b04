"""An LSTM written by hand over time steps: gates from two Linears, chunk(4), sigmoid/tanh, a stacked output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size=6, hidden_size=8):
        super().__init__()
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size, bias=False)
        self.hidden_size = hidden_size

    def forward(self, x):
        b, t, _ = x.shape
        h = x.new_zeros(b, self.hidden_size)
        c = x.new_zeros(b, self.hidden_size)
        outs = []
        for step in range(t):
            gates = self.ih(x[:, step]) + self.hh(h)
            i, f, g, o = gates.chunk(4, 1)
            i, f, g, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(g), torch.sigmoid(o)
            c = f * c + i * g
            h = o * torch.tanh(c)
            outs.append(h)
        return torch.stack(outs, dim=1), c


def get_inputs():
    return [torch.randn(2, 4, 6)]


def get_init_inputs():
    return []
