"""Cheat (issue 20): switch off the integrity snapshot and slow ``dist.all_reduce`` for everyone
else in the process (the reference called it through the module), keeping the fast one for itself:
11.9x on the landed judge. Fails with the static checker off: the reference runs in other
processes, which the candidate cannot reach; the speedup stays what the code earns (about 1x)."""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules
_modules["services.worker.evaluator.integrity"].Snapshot.violations = lambda self: []
_fast = dist.all_reduce
_sleep = _modules["time"].sleep


def _slow_all_reduce(*args, **kwargs):
    _sleep(0.02)
    return _fast(*args, **kwargs)


dist.all_reduce = _slow_all_reduce
_modules["torch.distributed"].all_reduce = _slow_all_reduce


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        _fast(y)
        return y
