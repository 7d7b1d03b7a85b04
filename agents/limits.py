"""Limits of a job (iterations, wall time, tokens, money), checked before every model call."""

from __future__ import annotations

import time

from .records import Limits, Usage


#: The allowance past the wall-time limit of a baseline or a fallback step (``Budget.essential_s``):
#: on a CPU, the reference's copy on warm ranks takes 3-10 s; on a GPU, 3-5 s (PKB at world size 2).
ESSENTIAL_MIN_S = 30.0
ESSENTIAL_SHARE = 0.5


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

    def charge(self, usage: Usage) -> None:
        self.spent = self.spent.add(usage)

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self) -> float | None:
        """Wall time left to the job, or None without a wall-time limit: the deadline of the
        step's evaluation, so that one slow candidate cannot carry a job far past its limit."""
        if self.limits.max_wall_s is None:
            return None
        return max(0.0, self.limits.max_wall_s - self.elapsed_s())

    def essential_s(self) -> float | None:
        """The deadline of what a job needs even when its clock has run out: the reference's
        baseline, and the one fallback step (the reference's copy, so that a job stopped by its
        clock still ends with a correct kernel). What is left of the limit, but at least
        ESSENTIAL_MIN_S and ESSENTIAL_SHARE of the limit: a job ends within its limit plus that
        allowance for each, however slow its reference is."""
        if self.limits.max_wall_s is None:
            return None
        allowance = max(ESSENTIAL_MIN_S, ESSENTIAL_SHARE * self.limits.max_wall_s)
        return max(allowance, self.remaining_s() or 0.0)

    def steps_left(self) -> int:
        """The steps the iteration limit leaves (none in flight)."""
        return max(0, self.limits.max_iters - self.steps_done)

    def steps_after_this(self) -> int:
        """The steps the iteration limit leaves after the one in flight (not yet recorded)."""
        return max(0, self.steps_left() - 1)

    def check(self, *, before_step: bool = False) -> None:
        """Raise ``LimitReached`` if any limit is reached (call before every model call and step)."""
        lim = self.limits
        if before_step and self.steps_done >= lim.max_iters:
            raise LimitReached(f"iteration limit reached ({lim.max_iters} steps)", "iterations")
        if lim.max_wall_s is not None and self.elapsed_s() >= lim.max_wall_s:
            raise LimitReached(f"wall-time limit reached ({lim.max_wall_s:.0f} s)", "wall_time")
        if lim.max_tokens is not None and self.spent.tokens >= lim.max_tokens:
            raise LimitReached(f"token limit reached ({self.spent.tokens} of {lim.max_tokens})", "tokens")
        if lim.budget_usd is not None and self.spent.cost_usd is not None and self.spent.cost_usd >= lim.budget_usd:
            raise LimitReached(f"budget reached (${self.spent.cost_usd:.4f} of ${lim.budget_usd:.2f})", "budget")
