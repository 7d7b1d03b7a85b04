"""Limits of a job (iterations, wall time, tokens, money), checked before every model call."""

from __future__ import annotations

import time

from .records import Limits, Usage


#: What a job without a correct kernel keeps of its wall time for its one fallback step (the
#: reference's copy), as a multiple of what its baseline took: the copy runs the reference's code
#: on both sides, through trials and the interleaved timing that the baseline ran once on one side.
#: An estimate only; the limit itself is what no evaluation outlasts.
FALLBACK_RESERVE_FACTOR = 3.0


def fallback_reserve_s(baseline_seconds: float | None) -> float:
    """The wall time kept for the fallback step of a job whose baseline took ``baseline_seconds``."""
    return FALLBACK_RESERVE_FACTOR * max(0.0, baseline_seconds or 0.0)


class LimitReached(Exception):
    """A limit stops the job; the message says which, ``kind`` names it (iterations, wall_time,
    tokens, budget)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


class Budget:
    def __init__(self, limits: Limits, spent: Usage | None = None, steps_done: int = 0, started: float | None = None):
        self.limits = limits
        self.spent = spent or Usage()
        self.steps_done = steps_done
        self.started = time.monotonic() if started is None else started
        #: Wall time kept for the fallback step while the job has no correct kernel (set from the
        #: baseline: ``fallback_reserve_s``); the loop decides when it is held.
        self.reserve_s = 0.0
        #: What of it is held back now (by the loop, step by step): every check and every model
        #: call counts it as spent, so that only the fallback step spends it.
        self.holding_s = 0.0

    def charge(self, usage: Usage) -> None:
        self.spent = self.spent.add(usage)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self, held_s: float = 0.0) -> float | None:
        """Wall time left to the job, less ``held_s`` kept for later (never below zero), or None
        without a wall-time limit: the deadline of the step's evaluation, so that no candidate,
        and no reference, carries a job past its limit."""
        if self.limits.max_wall_s is None:
            return None
        return max(0.0, self.limits.max_wall_s - held_s - self.elapsed_s())

    def steps_left(self) -> int:
        """The steps the iteration limit leaves (none in flight)."""
        return max(0, self.limits.max_iters - self.steps_done)

    def steps_after_this(self) -> int:
        """The steps the iteration limit leaves after the one in flight (not yet recorded)."""
        return max(0, self.steps_left() - 1)

    def check(self, *, before_step: bool = False) -> None:
        """Raise ``LimitReached`` if any limit is reached (call before every model call and step);
        the wall time held back (``holding_s``) counts as spent."""
        lim, held_s = self.limits, self.holding_s
        if before_step and self.steps_done >= lim.max_iters:
            raise LimitReached(f"iteration limit reached ({lim.max_iters} steps)", "iterations")
        if lim.max_wall_s is not None and self.elapsed_s() >= lim.max_wall_s - held_s:
            kept = f", less {held_s:.0f} s kept for the fallback step" if held_s > 0 and self.elapsed_s() < lim.max_wall_s else ""
            raise LimitReached(f"wall-time limit reached ({lim.max_wall_s:.0f} s{kept})", "wall_time")
        if lim.max_tokens is not None and self.spent.tokens >= lim.max_tokens:
            raise LimitReached(f"token limit reached ({self.spent.tokens} of {lim.max_tokens})", "tokens")
        if lim.budget_usd is not None and self.spent.cost_usd is not None and self.spent.cost_usd >= lim.budget_usd:
            raise LimitReached(f"budget reached (${self.spent.cost_usd:.4f} of ${lim.budget_usd:.2f})", "budget")
