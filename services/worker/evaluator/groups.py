"""Process groups a workload makes while it builds its model or draws its inputs, made once per
rank process and handed out again on every later draw.

The judge draws fresh inputs for every trial and every timed call. A workload whose
``get_inputs`` makes its groups (ParallelKernelBench's input builder calls ``dist.new_group`` for
its tensor- and context-parallel groups on every call) would otherwise get a new communicator per
call: NCCL sets each one up on its first collective, inside the timed call, and keeps it until the
process ends. On two H200s that put 343-651 ms of setup into every timed call of a 1.1 ms ring
attention, on both sides, growing with every group made, and made a trial of it outlast a 15 s
step. A group is a handle to a communicator, not data: the same ranks with the same options get the
same group back for as long as the default group it was made under is the default group.

Every rank draws the same sequence (same workload, same seeds), so every rank reuses or makes a
group at the same point, and ``new_group``'s rule (all ranks call it in the same order) holds.
"""

from __future__ import annotations

import functools
import inspect
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Iterator

import torch
import torch.distributed as dist

_MADE: dict[tuple, tuple[Any, Any]] = {}  # key -> (the default group then, the group)
_SIMPLE = (type(None), bool, int, float, str, torch.device)


def _key(bound: inspect.BoundArguments) -> tuple | None:
    """The group's identity from ``new_group``'s arguments; None where one cannot be compared
    (process-group options, an unusual value): that call makes its group as it asked."""
    items = []
    for name, value in sorted(bound.arguments.items()):
        if name == "ranks" and value is not None:
            value = tuple(int(r) for r in value)
        elif name == "timeout" and isinstance(value, timedelta):
            value = value.total_seconds()
        elif name == "pg_options" and value is not None:
            return None
        elif not isinstance(value, _SIMPLE):
            return None
        items.append((name, value))
    return tuple(items)


def _default():
    """The default group, which every rank sees replaced at the same point (a per-group check,
    say of a group one rank destroyed, could send the ranks different ways)."""
    return dist.distributed_c10d._get_default_group()


@functools.lru_cache(maxsize=4)
def _signature(fn) -> inspect.Signature:
    """``new_group``'s signature, read once: ``inspect.signature`` took ~0.1 ms, and every timed
    call's inputs are drawn inside ``reused_groups`` (on the CPU, a fifth of a small call's draw)."""
    return inspect.signature(fn)


@contextmanager
def reused_groups() -> Iterator[None]:
    """Within: ``torch.distributed.new_group`` returns the group an earlier call with the same
    arguments made in this process (``dist.new_subgroups`` and the like call it too)."""
    c10d = dist.distributed_c10d if dist.is_available() else None
    if c10d is None or not dist.is_initialized():
        yield
        return
    original = c10d.new_group
    signature = _signature(original)

    def new_group(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)
        key = _key(bound)
        if key is None:
            return original(*args, **kwargs)
        default = _default()
        under, found = _MADE.get(key, (None, None))
        if under is not default:
            found = original(*args, **kwargs)
            _MADE[key] = (default, found)
        return found

    saved = dist.new_group
    c10d.new_group = dist.new_group = new_group
    try:
        yield
    finally:
        c10d.new_group, dist.new_group = original, saved
