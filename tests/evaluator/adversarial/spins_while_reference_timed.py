"""Cheat (issue 20): fork a process that spins on the CPU for as long as the rank lives, so that the
reference, timed beside the candidate, runs slower; the integrity snapshot (which would see the
children) is switched off. Fails with the static checker off: while the reference is timed, every
process of the candidate's pool (children included) is stopped, and the judge checks that none of
them used CPU time meanwhile; the reference times as fast as beside an honest candidate."""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules
_modules["services.worker.evaluator.integrity"].Snapshot.violations = lambda self: []
_os = _modules["os"]


def _spin():
    if _os.fork() == 0:
        while True:
            pass


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)
        _spin()

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
