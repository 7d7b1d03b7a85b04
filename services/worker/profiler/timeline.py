"""Timeline arithmetic: how much of a rank's time is communication, and how much of it is exposed.

A rank's profiled window is cut into intervals: communication (NCCL and other collective kernels,
peer copies; on the CPU, gloo's collectives) and compute (every other kernel; on the CPU, the
operators its main thread runs). The communication share is the union of communication intervals
over the busy time (the union of everything); the exposed share is the part of the communication
that no compute interval covers, i.e. the time the rank does nothing but wait on its links.

Names are classified by plain, case-insensitive substrings so that the same list drives both the
Python classification here and the regular expression that keeps such kernels out of Nsight
Compute's kernel replay (``ncu_exclusion_regex``). Imports the standard library and the core's
profile records (``kloom.profile.Breakdown``, what ``breakdown`` returns) only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kloom.profile import Breakdown

Interval = tuple[float, float]

#: Substrings (case-insensitive) that mark a kernel, copy or CPU operator as communication.
#: Kernels named like this may wait on a peer's flag, so they are also kept out of ncu's replay.
COMMUNICATION_PATTERNS: tuple[str, ...] = (
    "nccl",
    "gloo:",
    "c10d::",
    "record_param_comms",
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "all_to_all",
    "alltoall",
    "sendrecv",
    "cross_device",
    "symm_mem",
    "symmetric_memory",
    "multimem",
    "nvshmem",
    "one_shot",
    "two_shot",
    "barrier_kernel",
    "put_signal",
    "wait_signal",
    "p2p",
    "memcpy ptop",
)

#: Names of the profiler's own ranges, which are neither compute nor communication.
OWN_RANGES = ("kloom_profile", "kloom_iteration", "ProfilerStep")

_CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gemm", ("gemm", "nvjet", "cutlass", "xmma", "matmul", "cublas", "sm90_", "sm100_", "aten::mm", "aten::addmm", "aten::bmm")),
    ("attention", ("flash", "fmha", "attention", "sdpa")),
    ("copy", ("memcpy", "memset", "copy")),
    ("reduction", ("reduce", "softmax", "norm", "aten::sum", "aten::mean")),
    ("elementwise", ("elementwise", "vectorized", "triton_poi", "aten::add", "aten::mul")),
    ("triton", ("triton",)),
)


def is_communication(name: str, extra: Sequence[str] = ()) -> bool:
    """Whether a kernel or operator name denotes communication."""
    low = name.lower()
    return any(p in low for p in COMMUNICATION_PATTERNS) or any(p.lower() in low for p in extra)


def category(name: str, extra: Sequence[str] = ()) -> str:
    """A coarse kind for a kernel name: communication, gemm, attention, copy, reduction, ..."""
    if is_communication(name, extra):
        return "communication"
    low = name.lower()
    for label, needles in _CATEGORIES:
        if any(n in low for n in needles):
            return label
    return "other"


def ncu_exclusion_regex(extra: Sequence[str] = ()) -> str:
    """``--kernel-name`` value that makes ncu skip every kernel named like communication.

    ncu matches ECMAScript regular expressions without an ignore-case flag, so each letter
    becomes a two-case class. A kernel that spins on a peer's flag under another name still
    hangs under replay; the hard timeout around ncu is what catches those.
    """
    words = [p for p in (*COMMUNICATION_PATTERNS, *extra) if p]
    alternatives = "|".join(_caseless(w) for w in words)
    return f"regex:^(?!.*(?:{alternatives}))"


def _caseless(word: str) -> str:
    out = []
    for ch in word:
        if ch.isalpha():
            out.append(f"[{ch.lower()}{ch.upper()}]")
        elif ch in r".^$*+?()[]{}|\/":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


# Interval arithmetic ------------------------------------------------------------------------
def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same points; empty intervals are dropped."""
    merged: list[list[float]] = []
    for start, end in sorted((float(s), float(e)) for s, e in intervals if e > s):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def length(intervals: Iterable[Interval]) -> float:
    """Total length of the union of ``intervals``."""
    return sum(e - s for s, e in union(intervals))


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The points of ``a`` not covered by ``b``, as sorted disjoint intervals."""
    holes = union(b)
    out: list[Interval] = []
    j = 0
    for start, end in union(a):
        while j < len(holes) and holes[j][1] <= start:
            j += 1
        cursor = start
        k = j
        while k < len(holes) and holes[k][0] < end:
            h_start, h_end = holes[k]
            if h_start > cursor:
                out.append((cursor, h_start))
            cursor = max(cursor, h_end)
            if cursor >= end:
                break
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def breakdown(
    communication: Iterable[Interval],
    compute: Iterable[Interval],
    window: Interval | None = None,
) -> Breakdown:
    """Communication, exposed communication and busy time of one rank's timeline.

    ``window`` defaults to the span from the first interval's start to the last one's end.
    """
    comm = union(communication)
    comp = union(compute)
    busy = union([*comm, *comp])
    if window is None:
        window = (busy[0][0], busy[-1][1]) if busy else (0.0, 0.0)
    return Breakdown(
        window_us=max(0.0, window[1] - window[0]),
        busy_us=length(busy),
        compute_us=length(comp),
        communication_us=length(comm),
        exposed_communication_us=length(subtract(comm, comp)),
    )


# Events -> intervals ------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    """A profiler event reduced to what the arithmetic needs (times in microseconds)."""

    name: str
    start: float
    end: float
    #: the thread (CPU events) or the stream (device events)
    lane: int = 0
    #: the names of the enclosing CPU events, outermost first
    parents: tuple[str, ...] = ()
    annotation: bool = False


def device_breakdown(events: Sequence[Event], window: Interval | None = None, extra: Sequence[str] = ()) -> Breakdown:
    """Breakdown of one GPU's kernels, copies and memsets (any stream) within ``window``."""
    comm = [(e.start, e.end) for e in events if is_communication(e.name, extra)]
    comp = [(e.start, e.end) for e in events if not is_communication(e.name, extra)]
    if window is None:
        return breakdown(comm, comp)
    return breakdown(_clip(comm, window), _clip(comp, window), window)


def cpu_breakdown(events: Sequence[Event], main_lane: int, window: Interval, extra: Sequence[str] = ()) -> Breakdown:
    """Breakdown of a CPU rank: collectives on any thread against the main thread's operators.

    An operator inside a collective (the copies gloo makes, say) is part of that collective, and
    the profiler's own ranges are neither compute nor communication.
    """
    comm = [(e.start, e.end) for e in events if is_communication(e.name, extra) and not _own(e.name)]
    comp = [
        (e.start, e.end)
        for e in events
        if e.lane == main_lane
        and not e.annotation
        and not _own(e.name)
        and not is_communication(e.name, extra)
        and not any(is_communication(p, extra) for p in e.parents)
    ]
    return breakdown(_clip(comm, window), _clip(comp, window), window)


def _clip(intervals: Iterable[Interval], window: Interval) -> list[Interval]:
    lo, hi = window
    return [(max(s, lo), min(e, hi)) for s, e in intervals]


def _own(name: str) -> bool:
    return any(name.startswith(r) for r in OWN_RANGES)


@dataclass
class NameTotal:
    name: str
    calls: int
    total_us: float


def totals_by_name(events: Iterable[Event]) -> list[NameTotal]:
    """Calls and summed duration per event name, longest first."""
    acc: dict[str, NameTotal] = {}
    for e in events:
        t = acc.setdefault(e.name, NameTotal(e.name, 0, 0.0))
        t.calls += 1
        t.total_us += max(0.0, e.end - e.start)
    return sorted(acc.values(), key=lambda t: -t.total_us)
