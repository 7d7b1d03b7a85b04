"""A two-layer batch-first LSTM with initial states as buffers, the last step through a Linear; returns the output and the final cell state."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size=8, hidden_size=12, num_layers=2, output_size=4, batch=3):
        super().__init__()
        self.register_buffer("h0", torch.randn(num_layers, batch, hidden_size))
        self.register_buffer("c0", torch.randn(num_layers, batch, hidden_size))
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers, batch_first=True, dropout=0.0)
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        out, (hn, cn) = self.lstm(x, (self.h0, self.c0))
        return self.fc(out[:, -1, :]), cn


def get_inputs():
    return [torch.randn(3, 5, 8)]


def get_init_inputs():
    return []
