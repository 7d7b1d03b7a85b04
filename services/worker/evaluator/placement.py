"""Where the judge's processes run on the CPU while blocks are timed.

The two sides' blocks are compared on the judge's wall clock, and their time outside the calls
(drawing inputs, projecting outputs, the round trip) is host work that runs at the pace of the
core it lands on. Spare candidate ranks begun ahead import torch meanwhile; where the scheduler
put one of them beside one side's rank and not the other's, that side's whole evaluation ran
1.7x slower per call (judge_blocks.py on an H200 machine: reference 1.0 ms a call in every round,
candidate 0.6), and the clock cross-check rejected an honest candidate on it. So, where the
machine has the cores: rank i of both sides (with its launcher) runs on cores of its own, the
same for both sides (they take turns, the other stopped), the judge's thread on a core of its
own, and everything else of the pools (the spares) on the remaining cores. A rank gets two cores
where there are enough, so that a helper thread of its own (NCCL's proxy, say) does not take
turns with its main thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Cores left to the rest (spares, launchers, the service) at the least; below this, no placement.
MIN_REST = 2
#: Cores a rank gets at most.
PER_RANK = 2


@dataclass(frozen=True)
class Placement:
    ranks: list[frozenset[int]]  # the cores of rank i (both sides)
    judge: int
    rest: frozenset[int]


def plan(world_size: int, cpus: set[int] | None = None) -> Placement | None:
    """Cores for ``world_size`` ranks (``PER_RANK`` each where there are enough, else one) and
    the judge, and the rest; None where too few cores."""
    available = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    per_rank = min(PER_RANK, (len(available) - 1 - MIN_REST) // max(1, world_size))
    if per_rank < 1:
        return None
    used = world_size * per_rank
    ranks = [frozenset(available[i * per_rank:(i + 1) * per_rank]) for i in range(world_size)]
    return Placement(ranks=ranks, judge=available[used], rest=frozenset(available[used + 1:]))


def pin(pids: list[int], cpus: set[int] | frozenset[int]) -> int:
    """Every thread of ``pids`` to ``cpus`` (threads made later inherit it); returns how many
    threads moved. Processes that exited, or that this process may not move, are left alone."""
    moved = 0
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in threads:
            try:
                os.sched_setaffinity(int(tid), cpus)
                moved += 1
            except (OSError, ValueError):
                pass
    return moved
