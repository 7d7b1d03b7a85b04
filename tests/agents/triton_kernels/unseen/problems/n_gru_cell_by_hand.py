"""A GRU cell written by hand, run over the sequence: reset and update gates, candidate state."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size=5, hidden_size=8):
        super().__init__()
        self.w_ih = nn.Parameter(torch.randn(3 * hidden_size, input_size) * 0.3)
        self.w_hh = nn.Parameter(torch.randn(3 * hidden_size, hidden_size) * 0.3)
        self.b_ih = nn.Parameter(torch.randn(3 * hidden_size) * 0.1)
        self.b_hh = nn.Parameter(torch.randn(3 * hidden_size) * 0.1)
        self.hidden_size = hidden_size

    def forward(self, x, h):
        for t in range(x.shape[0]):
            gi = torch.addmm(self.b_ih, x[t], self.w_ih.t())
            gh = torch.addmm(self.b_hh, h, self.w_hh.t())
            i_r, i_z, i_n = gi.split(self.hidden_size, dim=1)
            h_r, h_z, h_n = gh.split(self.hidden_size, dim=1)
            r = torch.sigmoid(i_r + h_r)
            z = torch.sigmoid(i_z + h_z)
            n = torch.tanh(i_n + r * h_n)
            h = (1 - z) * n + z * h
        return h


def get_inputs():
    return [torch.randn(3, 4, 5), torch.randn(4, 8)]


def get_init_inputs():
    return []
