"""Cheat (issue 20): do exactly the reference's work, and make the rank's clock report half of
every call's time (reaching the timing module through ``getattr(torch, "sys").modules``, the
integrity snapshot switched off). Nothing else is wrong with it: only the judge's own clock of
each block says the calls took twice what it reports. Before the clock check's slack stopped
growing with the candidate's own block time, this was credited about 2x on calls of ~30 ms on
the CPU; now it is rejected."""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules
_timing = _modules["services.worker.evaluator.timing"]
_real_clock, _real_elapsed = _timing._perf_counter, _timing._elapsed_time
_origin = _real_clock()
_timing._perf_counter = lambda: _origin + (_real_clock() - _origin) / 2
_timing._elapsed_time = lambda start, end: _real_elapsed(start, end) / 2
_modules["services.worker.evaluator.integrity"].Snapshot.violations = lambda self: []


class ModelNew(nn.Module):
    def forward(self, x):
        z = torch.full((256, 256), 0.01)
        for _ in range(24):
            z = torch.tanh(z @ z)
        y = x * 2 + 0 * z[0, 0]
        dist.all_reduce(y)
        return y
