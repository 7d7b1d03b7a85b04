"""An honest candidate for linear_allreduce that leaves a forged autotuner behind: its cache flooded
with choices, some of them no configuration at all, for the rank to report after timing (the
knowledge base would keep them for the next candidate)."""
import torch
import torch.distributed as dist
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def forged_kernel(x_ptr, n, B: tl.constexpr):
    pass


TUNER = triton.autotune(configs=[triton.Config({"B": 1}), triton.Config({"B": 2})], key=["n"])(forged_kernel)
TUNER.cache[("x" * 10000,)] = TUNER.configs[0]  # a key far too long
TUNER.cache[((1, 2), "torch.float32")] = TUNER.configs[0]  # a key that is not flat
TUNER.cache[(7,)] = triton.Config({"B": [1, 2]}, num_warps=True)  # no configuration at all
TUNER.cache[(8,)] = triton.Config({"B": 1}, num_warps=4096)  # warps no GPU has
for i in range(5000):
    TUNER.cache[(i, "torch.float32")] = TUNER.configs[i % 2]


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
