"""Simulated ranks for the comm kernels' CPU tests: every rank's buffers in one process
(``emulated_peers``), and a call of a kernel on all of them as the interpreter can run it: each
rank's communication phase first, then each rank's compute phase, under one epoch."""

from __future__ import annotations

from typing import Callable

import torch


def run_ranks(call: Callable[..., object], world: int, epoch: int, phases=(1, 2)) -> list:
    """``call(rank, phase=p, epoch=epoch)`` for every phase in order, every rank within a
    phase; returns the last phase's results, by rank."""
    results = []
    for phase in phases:
        results = [call(rank, phase=phase, epoch=epoch) for rank in range(world)]
    return results


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str, atol: float = 1e-4, rtol: float = 1e-4) -> None:
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=lambda m: f"{what}: {m}")
