"""Cheat (issue 20): through ``getattr(torch, "sys").modules`` reach the rank's timing module and
make its clock (perf_counter on the CPU, CUDA events on a GPU) report a fiftieth of the time, switch
off the integrity snapshot, then do twenty times the work. Caught with the static checker off: the
judge's own clock measures every timed block from outside the candidate's process, and the time
the candidate's clock leaves unaccounted exceeds the reference's by far more than the bound."""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules
_timing = _modules["services.worker.evaluator.timing"]
_real_clock, _real_elapsed = _timing._perf_counter, _timing._elapsed_time
_origin = _real_clock()
_timing._perf_counter = lambda: _origin + (_real_clock() - _origin) / 50
_timing._elapsed_time = lambda start, end: _real_elapsed(start, end) / 50
_modules["services.worker.evaluator.integrity"].Snapshot.violations = lambda self: []


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        for _ in range(3000):
            y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
