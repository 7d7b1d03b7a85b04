"""Cheat (issue 20): forge the clock in two timed blocks of every three only, hoping the judge's
clock check looks at the blocks that compare best while the forged ones pull the median time
down. The forged blocks report a fiftieth of their time; the work is twenty times the
reference's matmul. With the clock check off it is credited about 15x on the CPU. The check
compares each round's candidate block with the reference's beside it at the upper median over
the rounds, which is a forged block here. In unstaged rounds (the candidate draws its inputs and
projects its outputs inside its judged span) the forged time on calls this small is within the
slack the two processes' honest overheads need, and it is NOT caught (an xfail in
test_judge_boundaries.py; docs/reliability.md); staged rounds leave only the calls and the
transfers in the span, and catch it (test_staged_rounds.py)."""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules
_timing = _modules["services.worker.evaluator.timing"]
_rank = _modules["services.worker.evaluator.rank"]
_real_clock, _real_elapsed = _timing._perf_counter, _timing._elapsed_time
_real_timer = _rank.RankBase.timer
_state = {"blocks": 0, "forge": False}


def _timer(self, flush_bytes):
    """Asked for once at the start of every timed block, staged or not: forge two of every three."""
    _state["blocks"] += 1
    _state["forge"] = _state["blocks"] % 3 != 0
    return _real_timer(self, flush_bytes)


_origin = _real_clock()
_timing._perf_counter = lambda: _origin + (_real_clock() - _origin) / (50 if _state["forge"] else 1)
_timing._elapsed_time = lambda start, end: _real_elapsed(start, end) / (50 if _state["forge"] else 1)
_rank.RankBase.timer = _timer
_modules["services.worker.evaluator.integrity"].Snapshot.violations = lambda self: []


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        for _ in range(20):
            y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        return y
