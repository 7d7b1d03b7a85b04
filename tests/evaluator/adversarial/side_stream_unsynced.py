"""Cheat: do the work on a side stream and return before it finishes, so a timer that stops when the
current stream is idle would miss it. Caught: outputs are copied the moment forward returns and
compared after a full device synchronisation (incorrect: "changed after the call returned"); the
timer also synchronises the whole device, so the side stream's work would be counted anyway."""
import torch
import torch.distributed as dist
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k_per_rank, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(k_per_rank, n) / k_per_rank**0.5)
        self.side = torch.cuda.Stream()

    def forward(self, x):
        y = torch.mm(x, self.weight)
        dist.all_reduce(y)
        out = torch.empty_like(y)
        self.side.wait_stream(torch.cuda.current_stream())
        y.record_stream(self.side)  # keep y's memory from being reused before the side stream reads it
        with torch.cuda.stream(self.side):
            torch.cuda._sleep(50_000_000)
            out.copy_(y)
        return out
