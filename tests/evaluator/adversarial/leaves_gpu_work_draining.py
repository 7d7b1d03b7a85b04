"""Cheat (issue 20, "device work left running"), the backlog that drains: honest outputs, and
beside them a backlog of matmuls on a stream of its own that nobody waits for. The device syncs the timer and the rank
make before replying are patched to wait for the current stream only, so the backlog runs on
after the candidate's block ends and its processes are stopped: on a GPU that time-slices between
processes, the reference's calls beside it take longer. Each call tops the backlog up to about
100 ms of work when the one before has drained (queueing more would block its own launches). Gains
nothing with the static checker off: the reference's ranks probe the GPU before their blocks
(``gpu_quiet.py``), wait for the backlog to drain and flag it (on an H100: waited 0.07 s, credited
1.05x). ``leaves_gpu_work_running.py`` leaves work that outlasts the wait."""
import torch
import torch.distributed as dist
import torch.nn as nn

_modules = getattr(torch, "sys").modules


def _current_stream_only(device=None):
    torch.cuda.current_stream().synchronize()


_modules["services.worker.evaluator.timing"]._cuda_sync = _current_stream_only
_modules["services.worker.evaluator.rank"].RankBase.sync = lambda self: _current_stream_only()

_state = {}


def _top_up(device) -> None:
    if "side" not in _state:
        _state["side"] = torch.cuda.Stream(device)
        _state["a"] = torch.randn(4096, 4096, device=device, dtype=torch.float16)
        _state["done"] = None
    done = _state["done"]
    if done is not None and not done.query():
        return
    side = _state["side"]
    with torch.cuda.stream(side):
        for _ in range(400):  # ~0.25 ms each on an H100: ~100 ms
            torch.mm(_state["a"], _state["a"])
        _state["done"] = torch.cuda.Event()
        _state["done"].record(side)


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        if y.is_cuda:
            _top_up(y.device)
        return y
