"""Cheat (with the static checker off): patch the rank's timed call so that only a block's last call
(the one whose outputs the judge takes whole; the harness marks it ``keep``) computes, and every
other call hands back the outputs computed last, which belong to other inputs. Each timed call
costs nothing but the last, so the speedup is about the block's length; the trials (which do not
go through the timed call) are honest. Caught: every timed call's outputs are projected on a
random sign vector, and the judge compares each call's projection with the reference's call on
the same inputs (``incorrect``, *computes only some of the timed calls*)."""
import torch
import torch.distributed as dist
import torch.nn as nn

_rank = getattr(torch, "sys").modules["services.worker.evaluator.rank"]
_last = {"outputs": None}


def _call(self):
    if self.keep or _last["outputs"] is None:
        with torch.no_grad():
            _last["outputs"] = self.model(*self.inputs)
    out = _last["outputs"]
    self.out = out if getattr(self, "hold", False) else None
    self.kept = out if self.keep else None


_rank.TimedCall.__call__ = _call


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
