"""Cheat (with the static checker off): do the work of every timed call of a block in its first
call and let the others hand back what that call computed. Every output is right and every
call's time is honest on the candidate's clock (the clock check sees nothing hidden), but most
calls of a block take no time, so their median does: against medians alone it was credited about
the block's length in calls. Caught: where the candidate's mean call exceeds what its median
would give by more than the reference's does, the speedup is the ratio of the means, which no
reshuffling of time between calls can move. (A staged block brings every call's inputs with the
command; the patch keeps them for the first call.)"""
import torch
import torch.distributed as dist
import torch.nn as nn

_rank = getattr(torch, "sys").modules["services.worker.evaluator.rank"]
_real_staged = _rank.RankBase.run_staged
_state = {"ring": None, "outs": None, "call": 0}


def _staged(self, timed, timer, inputs, keep, quiet):
    _state["ring"], _state["outs"], _state["call"] = _rank.staged.unstack(inputs), None, 0
    try:
        return _real_staged(self, timed, timer, inputs, keep, quiet)
    finally:
        _state["ring"] = _state["outs"] = None


def _call(self):
    if _state["ring"] is None:  # a trial's or a warm-up's call: honest
        with torch.no_grad():
            out = self.model(*self.inputs)
    else:
        if _state["call"] == 0:
            device = self.inputs[0].device
            with torch.no_grad():
                _state["outs"] = [self.model(*[t.to(device) for t in args]) for args in _state["ring"]]
        out = _state["outs"][_state["call"]]
        _state["call"] += 1
    self.out = out if getattr(self, "hold", False) else None
    self.kept = out if self.keep else None


_rank.RankBase.run_staged = _staged
_rank.TimedCall.__call__ = _call


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
