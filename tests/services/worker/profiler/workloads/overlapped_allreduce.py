"""An all-reduce started asynchronously and hidden behind a chain of GEMMs."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

FAMILY = "data_parallel"
DESCRIPTION = "Asynchronous all-reduce of a gradient bucket overlapped with GEMMs."
WORLD_SIZES = [1, 2, 4]
SHAPES = {
    "ci": dict(bucket=16384, size=384, chain=16, dtype=torch.float32),
    "gpu": dict(bucket=64 << 20, size=8192, chain=4, dtype=torch.bfloat16),
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(size, size, dtype=P["dtype"]) / size**0.5)

    def forward(self, x, bucket):
        work = dist.all_reduce(bucket, async_op=True)
        for _ in range(P["chain"]):
            x = x @ self.weight
        work.wait()
        return x, bucket


def get_init_inputs():
    return [P["size"]]


def get_inputs():
    return [torch.randn(P["size"], P["size"], dtype=P["dtype"]), torch.randn(P["bucket"], dtype=P["dtype"])]
