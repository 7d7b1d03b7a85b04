"""Masked fills of every kind: attention's -inf before a softmax over a bfloat16 score (a padding
mask broadcast over heads and queries), a fill with NaN and one with a value held in a tensor
(both left to torch: the chain's fill goes through a NaN, and a tensor's value is not known when
planning), an in-place fill of a chain's own value, and a fill whose mask the chain computes."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("fill", torch.tensor(-2.0))

    def forward(self, s, pad, x):
        att = (s.bfloat16() * 0.5).masked_fill(pad[:, None, None, :], float("-inf"))
        probs = torch.softmax(att, dim=-1)
        m = x > 0.3
        nan_filled = (x * 3.0).masked_fill(m, float("nan"))
        tensor_filled = (x - 1.0).masked_fill(m, self.fill)
        y = torch.tanh(x)
        y.masked_fill_(m, 0.25)
        z = (x * 2.0).masked_fill(x.abs() < 0.1, -1e9)
        return probs, torch.nan_to_num(nan_filled, nan=7.0), tensor_filled, y + 1.0, z


def get_inputs():
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 5:] = True
    return [torch.randn(2, 3, 4, 7), pad, torch.randn(5, 9)]


def get_init_inputs():
    return []
