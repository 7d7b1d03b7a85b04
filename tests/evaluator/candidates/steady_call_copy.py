"""steady_call's own model as the candidate: the same calls, the same time."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        z = torch.full((256, 256), 0.01)
        for _ in range(24):  # about 0.5 ms each on one core
            z = torch.tanh(z @ z)
        y = x * 2 + 0 * z[0, 0]
        dist.all_reduce(y)
        return y
