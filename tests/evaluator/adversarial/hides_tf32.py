"""Cheat (issue 20): switch TF32 on for real (on a GPU, matmuls then round their operands to 10
mantissa bits) and hide it: the integrity snapshot switched off, the rank's precision report
forged. Caught on a GPU with the static checker off: the outputs, compared on the reference's
side, are outside the fp32 tolerance and the norm-wise bound. (On a CPU TF32 changes nothing.)"""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules
_modules["services.worker.evaluator.integrity"].Snapshot.violations = lambda self: []
_modules["services.worker.evaluator.precision"].flags = lambda: {
    "cuda.matmul.allow_tf32": False, "cudnn.allow_tf32": False, "float32_matmul_precision": "highest", "default_dtype": "float32"}
torch.backends.cuda.matmul.allow_tf32 = True


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
