"""Bug: reads far outside its tensor's memory (an illegal address on a GPU, a segmentation fault on
a CPU). Caught: the rank process dies (crashed, with the signal) or raises (runtime_error); the pool
is rebuilt."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()

    def forward(self, x):
        wild = x.as_strided((64, 64), (1 << 40, 1 << 38))
        return wild.clone()
