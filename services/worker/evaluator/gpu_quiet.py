"""Whether the GPU runs another process's work, seen from a rank that runs none of its own.

The judge stops the candidate's processes while the reference is timed, but kernels they queued
before the stop run on: the GPU time-slices between processes' contexts, and the reference's
calls would take longer beside them (issue 20, "device work left running"). The reference's rank
therefore probes before and after each timed block: with its own work drained, it launches a
one-element kernel and waits for it on the host. On an idle GPU that round trip takes tens of
microseconds; beside another context's kernels it waits for their time slice. The probe's median
over a few tries above ``threshold_ms`` means busy; before and after a block the rank waits up to
``patience_s`` for the GPU to go quiet (what was queued drains), and says what the first probe
read, how long it waited and whether it never went quiet.

Functions are bound at import, as the timer's are (this runs in the reference's processes, which
no candidate code reaches; the binding costs nothing).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import torch

_perf_counter = time.perf_counter
_sleep = time.sleep
_cuda_sync = torch.cuda.synchronize

TRIES = 5


@dataclass
class Quiet:
    probe_ms: float  # the last probe's median round trip
    waited_s: float = 0.0  # how long the rank waited for the GPU to go quiet
    busy: bool = False  # still busy when the patience ran out
    first_ms: float | None = None  # the first probe's (busy or not); None: the same as probe_ms

    def to_dict(self) -> dict:
        return asdict(self)


class QuietProbe:
    def __init__(self, device: torch.device):
        self.device = device
        self._one = torch.zeros(1, device=device)

    def round_trip_ms(self) -> float:
        """The median host round trip of a one-element kernel, this process's own work drained."""
        _cuda_sync(self.device)
        trips = []
        for _ in range(TRIES):
            t0 = _perf_counter()
            self._one.add_(1)
            _cuda_sync(self.device)
            trips.append((_perf_counter() - t0) * 1e3)
        return statistics.median(trips)

    def wait(self, threshold_ms: float, patience_s: float) -> Quiet:
        """Probe until quiet or ``patience_s`` has passed."""
        started = _perf_counter()
        first = None
        while True:
            probe = self.round_trip_ms()
            first = probe if first is None else first
            waited = _perf_counter() - started
            if probe <= threshold_ms:
                return Quiet(probe, waited, False, first)
            if waited >= patience_s:
                return Quiet(probe, waited, True, first)
            _sleep(0.005)
