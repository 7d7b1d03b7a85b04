"""Cheat (issue 20): switch on TF32 for matmuls and convolutions (on a GPU: 2.9e-4 norm-wise error
for up to 8x the fp32 throughput). Caught with the static checker off: the candidate's rank
reports its precision flags after every call, before anything in its process restores them, and
the workload does not allow TF32 (``PRECISION``)."""
import torch
import torch.distributed as dist
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
torch.set_float32_matmul_precision("high")


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
