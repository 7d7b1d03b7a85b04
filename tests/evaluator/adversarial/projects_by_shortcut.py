"""Cheat (with the static checker off): every timed call but a block's last (the one whose outputs
the judge takes whole; the harness marks it ``keep``) hands back zeros without computing, and the
projector in this process is patched to report, for the output ``y = all_reduce(x W)``, the
linear projection of the right outputs computed from the inputs instead of the outputs:
``<R, sum_ranks x W> = sum_ranks <x, R W^T>``, each rank's share summed across ranks as one
float64 (the collective on the outputs is never made). Against the judge that checked the linear
projection alone its every call passed, at a speedup of about the block's length. Caught: the
quadratic projection ``sum_j r'_j y_j^2`` of the zeros is 0, and it has no such shortcut
(``projection.py``): ``incorrect``, *computes only some of the timed calls*, naming the quadratic
projection. (The outputs are small: the projector stages them and projects a block's calls at its
end, ``_Stage.numbers``, which is what is patched.)"""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules
_rank = _modules["services.worker.evaluator.rank"]
_projection = _modules["services.worker.evaluator.projection"]
_honest_numbers = _projection._Stage.numbers
_seen = {"inputs": [], "weight": None, "zeros": None}


def _call(self):
    _seen["weight"] = self.model.weight
    if getattr(self, "hold", False):  # a projected call: its inputs, for the shortcut at the block's end
        _seen["inputs"].append(self.inputs)
    if self.keep:
        with torch.no_grad():
            out = self.model(*self.inputs)
    else:
        shape = (self.inputs[0].shape[0], self.model.weight.shape[1])
        if _seen["zeros"] is None or _seen["zeros"].shape != shape:
            _seen["zeros"] = torch.zeros(shape, device=self.inputs[0].device)
        out = _seen["zeros"]
    self.out = out if getattr(self, "hold", False) else None
    self.kept = out if self.keep else None


def _numbers(self, seed, position, chunk):
    rows = _honest_numbers(self, seed, position, chunk).clone()  # the zeros' numbers; only p is replaced
    weight = _seen["weight"].detach().double()
    inputs, _seen["inputs"] = _seen["inputs"][-len(self.calls):], []
    shares = []
    for call, got in zip(self.calls, inputs):
        x = got[0].double()
        r = _projection.signs(seed, position, 0, self.numel, x.device, call)[0].view(x.shape[0], weight.shape[1])
        shares.append((x * (r @ weight.t())).sum())
    share = torch.stack(shares)
    dist.all_reduce(share)
    rows[:, 0] = share
    return rows


_rank.TimedCall.__call__ = _call
_projection._Stage.numbers = _numbers


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
