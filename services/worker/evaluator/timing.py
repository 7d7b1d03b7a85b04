"""The timing protocol inside a rank process.

Each timed call: restore mutated inputs, evict the cache, barrier across ranks, start, call,
synchronise the whole device (so work left on side streams counts), stop. CUDA events on GPUs,
the monotonic wall clock on the CPU. The number of timed calls is chosen from the warm-up and
agreed across ranks so that every rank issues the same collectives.

A comparison of two functions (the reference and a candidate) times them interleaved, call by
call and in alternating order (A B, B A, ...): whatever slows the machine for a while (another
tenant, clocks, a compile worker) then weighs on both alike instead of on whichever was timed
during it. On a shared 2-core machine the same code timed in separate phases came out 0.7x to
1.5x of itself (benchmarks/results/timing_noise_cpu.md).

The functions used here are bound at import, before any candidate code is loaded, so a
candidate that patches ``torch.cuda.Event`` or ``time.perf_counter`` does not change them.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from typing import Any, Callable

import torch
import torch.distributed as dist

_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_elapsed_time = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize
_cuda_sync = torch.cuda.synchronize
_barrier = dist.barrier
_all_reduce = dist.all_reduce


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector held off for a timed span: a collection in a process
    holding torch can take tens of milliseconds, at a moment allocation counts choose, inside
    one side's block and not the other's (the clock cross-check compares the two). A span of calls
    makes little cyclic garbage; it is collected once the collector runs again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def settle_gc() -> None:
    """Collect what is not set aside yet, then set every object alive now aside from later
    collections (``gc.freeze``), so that a collection during timing scans only what timing made.
    A rank sets its imports aside as it starts (``rank_main``), so this scans one evaluation's
    objects, not torch's: a full collection in a process holding torch took ~0.2 s, paid inside
    every timing phase. What was set aside and later became cyclic garbage is freed by
    ``collect_all``, which a reference rank runs after its release (outside every timed span)."""
    gc.collect()
    gc.freeze()


def collect_all() -> None:
    """A full collection, what earlier settles set aside included, then everything alive set
    aside again: a process kept for the next evaluation frees the last one's models here."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class Timer:
    def __init__(self, device: torch.device, flush_bytes: int):
        self.device = device
        self.is_cuda = device.type == "cuda"
        if flush_bytes <= 0:
            if self.is_cuda:
                l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
                flush_bytes = 2 * max(l2, 8 << 20)
            else:
                flush_bytes = 8 << 20
        self._flush_buf = torch.empty(flush_bytes, dtype=torch.uint8, device=device)

    def flush(self) -> None:
        self._flush_buf.fill_(1)

    def sync(self) -> None:
        if self.is_cuda:
            _cuda_sync(self.device)

    def barrier(self) -> None:
        if dist.is_initialized() and dist.get_world_size() > 1:
            if self.is_cuda:
                _barrier(device_ids=[self.device.index])
            else:
                _barrier()
        self.sync()

    def time_call(self, fn: Callable[[], Any], restore: Callable[[], None] | None) -> float:
        """One timed call, in milliseconds."""
        if restore is not None:
            restore()
        self.flush()
        self.barrier()
        if self.is_cuda:
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _record(start)
            fn()
            _cuda_sync(self.device)
            _record(end)
            _event_sync(end)
            return _elapsed_time(start, end)
        t0 = _perf_counter()
        fn()
        return (_perf_counter() - t0) * 1e3

    def agree_max(self, value: float) -> float:
        """The largest value over all ranks (each rank passes its own)."""
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        _all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def measure(
        self,
        fn: Callable[[], Any],
        *,
        restore: Callable[[], None] | None,
        warmup: int,
        min_iters: int,
        max_iters: int,
        budget_s: float,
    ) -> list[float]:
        """Warm up, choose the iteration count within the budget, and return the samples (ms)."""
        # The budget bounds the wall time of the timed loop, flushes and barriers included.
        n_warm = max(1, warmup)
        t0 = _perf_counter()
        for _ in range(n_warm):
            self.time_call(fn, restore)
        per_call_s = (_perf_counter() - t0) / n_warm
        wanted = budget_s / max(per_call_s, 1e-6)
        iters = self._agreed_iters(wanted, min_iters, max_iters)
        return [self.time_call(fn, restore) for _ in range(iters)]

    def measure_pair(
        self,
        first: tuple[Callable[[], Any], Callable[[], None] | None],
        second: tuple[Callable[[], Any], Callable[[], None] | None],
        *,
        warmup: int,
        min_iters: int,
        max_iters: int,
        budget_s: float,
    ) -> tuple[list[float], list[float]]:
        """Two functions, each given as ``(fn, restore)``, timed interleaved: ``budget_s`` for each,
        the calls alternating in order from one pair to the next. Returns both sample lists (ms)."""
        n_warm = max(1, warmup)
        t0 = _perf_counter()
        for _ in range(n_warm):
            self.time_call(*first)
            self.time_call(*second)
        per_pair_s = (_perf_counter() - t0) / n_warm
        iters = self._agreed_iters(2 * budget_s / max(per_pair_s, 1e-6), min_iters, max_iters)
        a: list[float] = []
        b: list[float] = []
        for i in range(iters):
            if i % 2 == 0:
                a.append(self.time_call(*first))
                b.append(self.time_call(*second))
            else:
                b.append(self.time_call(*second))
                a.append(self.time_call(*first))
        return a, b

    def _agreed_iters(self, wanted: float, min_iters: int, max_iters: int) -> int:
        return int(self.agree_max(float(min(max_iters, max(min_iters, math.ceil(wanted))))))
