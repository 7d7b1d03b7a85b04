"""Cheat (issue 20, "device work left running"), the work that outlasts the judge's patience:
honest outputs, and beside them one kernel that spins for about three seconds on a stream of its
own (``torch.cuda._sleep``, one thread), launched again whenever the one before has ended. The
device syncs the timer and the rank make before replying are patched to wait for the current
stream only, so the spin runs on after the candidate's block ends and its processes are stopped;
the GPU time-slices between processes, and the reference's calls beside it take longer (seen by
the host: 0.38 -> 2.7 ms a call on an H100, benchmarks/gpu/busy_probe.py). Rejected with the
static checker off: the reference's ranks probe the GPU before their blocks, wait
``gpu_quiet_patience_s`` (2 s) for it to go quiet, and it does not (``gpu_quiet.py``)."""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules


def _current_stream_only(device=None):
    torch.cuda.current_stream().synchronize()


_modules["services.worker.evaluator.timing"]._cuda_sync = _current_stream_only
_modules["services.worker.evaluator.rank"].RankBase.sync = lambda self: _current_stream_only()

SPIN_CYCLES = 6_000_000_000  # about 3 s at the H100's 1.98 GHz
_state = {}


def _keep_spinning(device) -> None:
    if "side" not in _state:
        _state["side"] = torch.cuda.Stream(device)
        _state["done"] = None
    done = _state["done"]
    if done is not None and not done.query():
        return
    with torch.cuda.stream(_state["side"]):
        torch.cuda._sleep(SPIN_CYCLES)
        _state["done"] = torch.cuda.Event()
        _state["done"].record(_state["side"])


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        if y.is_cuda:
            _keep_spinning(y.device)
        return y
