"""The row-parallel linear of tests/evaluator/workloads/linear_allreduce.py at a size whose call is
device time, not host time: on one H200 a call takes about 1 ms (fp32, no TF32). The judge's cost
per candidate (benchmarks/judge_cost.py --workload ...) is measured on it beside the 64x32 case,
whose calls are all host time (the judge's per-call work weighs most there)."""

import os

import torch
import torch.distributed as dist
import torch.nn as nn

WORLD_SIZES = [1, 2]
FAMILY = "tensor_parallel"
DESCRIPTION = "Row-parallel linear (local GEMM, then all-reduce) at a size where a call is device time."

SHAPES = {
    "ci": dict(m=256, k=256, n=256),  # about 1 ms a call on one core of the CI machine
    "gpu": dict(m=4096, k=2048, n=4096),  # 69 GFLOP, a 64 MiB output
}
P = SHAPES[os.environ.get("KLOOM_SHAPES", "ci")]


class Model(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = x @ self.weight
        dist.all_reduce(y)
        return y


def get_init_inputs():
    return [P["k"] // dist.get_world_size(), P["n"]]


def get_inputs():
    return [torch.randn(P["m"], P["k"] // dist.get_world_size())]
