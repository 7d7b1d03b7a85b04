"""Nsight Compute: the command that wraps the launcher, and the CSV it exports, parsed.

ncu replays each selected kernel many times to read its counters. A kernel that waits on a peer
(NCCL, symmetric-memory signal pads) hangs under replay, because the other ranks do not replay
with it (shared/HARDWARE.md), so communication kernels are excluded by name
(``timeline.ncu_exclusion_regex``) and measured by timing instead; the caller runs ncu under a
hard timeout for the ones a name does not reveal. Clocks are never changed
(``--clock-control none``): the numbers must describe the GPU as the evaluator times it.

One ncu process follows the launcher into every rank (``--target-processes all``); only the
ranks chosen for profiling open a window with cudaProfilerStart/Stop, so with
``--profile-from-start off`` only their kernels are replayed, after warm-up. The report is then
exported twice: the ``raw`` page (one row per kernel launch, one column per metric) and the
``details`` page (for the Speed-of-Light rule's verdict). Standard library only.
"""

from __future__ import annotations

import csv
import functools
import io
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

#: In ncu's output when the driver does not let this user read the performance counters.
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
PERMISSION_REASON = (
    "ERR_NVGPUCTRPERM: this user may not read the GPU's performance counters "
    "(the driver's RmProfilingAdminOnly setting); fell back to the PyTorch profiler's kernel timeline"
)
#: ncu's output when no kernel matched the filters.
NOTHING_PROFILED = "No kernels were profiled"

# Metric names of the raw page (Nsight Compute's metric reference).
DURATION = "gpu__time_duration.sum"
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_THROUGHPUT = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"
REGISTERS = "launch__registers_per_thread"
SHARED_STATIC = "launch__shared_mem_per_block_static"
SHARED_DYNAMIC = "launch__shared_mem_per_block_dynamic"
SHARED_TOTAL = "launch__shared_mem_per_block"
KEPT = ("launch__grid_size", "launch__block_size", "launch__waves_per_multiprocessor", "dram__bytes.sum")
#: ncu's Speed-of-Light rule calls a kernel whose compute and memory throughput are both below
#: this share of peak latency-bound; the same threshold labels kernels when the rule is absent.
LATENCY_BOUND_PCT = 60.0

_ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC")
_TIME_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 1024.0, "Mi": 1024.0**2, "Gi": 1024.0**3}
_BYTES = re.compile(r"^(Ki|Mi|Gi|K|M|G|T)?byte(/.*)?$")


@dataclass
class Launch:
    """One replayed kernel launch from the raw page. Times in microseconds, sizes in bytes."""

    id: int
    pid: int
    device: int
    name: str
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class KernelMetrics:
    """One kernel name's metrics over its replayed launches (duration-weighted means)."""

    name: str
    launches: int
    duration_us: float
    devices: list[int]
    sm_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    dram_throughput_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    registers_per_thread: int | None = None
    shared_mem_per_block_bytes: int | None = None
    rule: str = ""
    metrics: dict[str, float] = field(default_factory=dict)


# Running ncu ----------------------------------------------------------------------------------
def find(path: str) -> str | None:
    """The ncu executable at ``path`` (a file) or on PATH (a name); None when there is none."""
    if os.sep in path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return shutil.which(path)


@functools.lru_cache(maxsize=8)
def version(ncu: str) -> str:
    """``ncu --version``'s last line, or an empty string."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@functools.lru_cache(maxsize=8)
def sections(ncu: str) -> tuple[str, ...]:
    """Section identifiers this ncu offers (``ncu --list-sections``); empty when it cannot say."""
    try:
        out = subprocess.run([ncu, "--list-sections"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return parse_section_list(out)


def parse_section_list(text: str) -> tuple[str, ...]:
    """Identifiers from ``ncu --list-sections`` output (a table whose first column they are)."""
    found = []
    for line in text.splitlines():
        word = line.strip().split(" ", 1)[0] if line.strip() else ""
        if word and word not in ("Identifier",) and not set(word) <= set("-") and re.fullmatch(r"[A-Za-z][\w.]*", word):
            found.append(word)
    return tuple(found)


def profile_command(
    ncu: str,
    *,
    report: str,
    sections: Sequence[str],
    kernel_filter: str,
    launch_skip: int,
    launch_count: int,
) -> list[str]:
    """The ncu arguments that go in front of the launcher's command line."""
    cmd = [
        ncu,
        "--clock-control", "none",
        "--target-processes", "all",
        "--profile-from-start", "off",
        "--replay-mode", "kernel",
        "--kernel-name", kernel_filter,
        "--launch-skip", str(launch_skip),
        "--launch-count", str(launch_count),
        "--export", report,
        "--force-overwrite",
    ]
    for section in sections:
        cmd += ["--section", section]
    return cmd


def export_command(ncu: str, report: str, page: str, plain: bool = False) -> list[str]:
    """The command that prints a saved report's ``raw`` or ``details`` page as CSV: in base
    units with demangled kernel names (the PyTorch profiler's names), or ``plain`` for an ncu
    that knows neither option (the parser reads any unit it prints)."""
    cmd = [ncu, "--import", report, "--csv", "--page", page]
    return cmd if plain else cmd + ["--print-units", "base", "--print-kernel-base", "demangled"]


def nvlink_sections(available: Sequence[str]) -> list[str]:
    return [s for s in available if s.lower().startswith("nvlink")]


# Parsing --------------------------------------------------------------------------------------
def _rows(text: str) -> list[list[str]]:
    """The CSV part of ncu's output: from the header (``"ID",...``) on; the profiled program's
    own output and ncu's ``==PROF==`` lines may come first."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return []
    return [row for row in csv.reader(io.StringIO("\n".join(lines[start:]))) if row]


def number(text: str) -> float | None:
    """A metric value as ncu prints it (thousands separators allowed); None for ``n/a``."""
    cleaned = text.strip().replace(",", "")
    if not cleaned:
        return None
    try:
        return float(cleaned)
    except ValueError:
        return None


def normalise(value: float, unit: str) -> float:
    """Times to microseconds, sizes to bytes; other units unchanged."""
    unit = unit.strip()
    if unit in _TIME_US:
        return value * _TIME_US[unit]
    match = _BYTES.match(unit)
    if match:
        return value * _PREFIX[match.group(1) or ""]
    return value


def parse_raw(text: str) -> list[Launch]:
    """Kernel launches from ``ncu --csv --page raw``: a header of column names, a row of units,
    then one row per launch."""
    rows = _rows(text)
    if not rows:
        return []
    header = rows[0]
    body = rows[1:]
    units = [""] * len(header)
    if body and not body[0][0].strip():
        units = body[0] + [""] * (len(header) - len(body[0]))
        body = body[1:]
    col = {name: i for i, name in enumerate(header)}
    launches = []
    for row in body:
        if len(row) < len(header) or not row[0].strip():
            continue
        metrics = {}
        for i, name in enumerate(header):
            if name in _ID_COLUMNS:
                continue
            value = number(row[i])
            if value is not None:
                metrics[name] = normalise(value, units[i])
        launches.append(
            Launch(
                id=int(number(row[col["ID"]]) or 0),
                pid=int(number(row[col["Process ID"]]) or 0) if "Process ID" in col else 0,
                device=int(number(row[col["Device"]]) or 0) if "Device" in col else 0,
                name=row[col["Kernel Name"]],
                metrics=metrics,
            )
        )
    return launches


def parse_rules(text: str) -> dict[tuple[int, int], str]:
    """The Speed-of-Light rule's verdict per launch (keyed by process ID and launch ID) from
    ``ncu --csv --page details``."""
    rows = _rows(text)
    if not rows:
        return {}
    col = {name: i for i, name in enumerate(rows[0])}
    verdicts: dict[tuple[int, int], str] = {}
    for row in rows[1:]:
        section = _cell(row, col, "Section Name")
        if "Rule Name" in col:
            rule, words = _cell(row, col, "Rule Name"), _cell(row, col, "Rule Description")
        else:
            # Older versions print a rule as a row without a metric name.
            rule = "SOLBottleneck" if not _cell(row, col, "Metric Name") and "Speed Of Light" in section else ""
            words = _cell(row, col, "Metric Value")
        if not words or not (rule == "SOLBottleneck" or (rule and "Speed Of Light" in section)):
            continue
        key = (int(number(_cell(row, col, "Process ID")) or 0), int(number(_cell(row, col, "ID")) or 0))
        verdicts.setdefault(key, " ".join(words.split()))
    return verdicts


def _cell(row: list[str], col: dict[str, int], name: str) -> str:
    i = col.get(name)
    return row[i] if i is not None and i < len(row) else ""


def aggregate(launches: Sequence[Launch], rules: dict[tuple[int, int], str] | None = None) -> dict[str, KernelMetrics]:
    """Per kernel name: launches, total replayed duration and duration-weighted metrics."""
    rules = rules or {}
    groups: dict[str, list[Launch]] = {}
    for launch in launches:
        groups.setdefault(launch.name, []).append(launch)
    out = {}
    for name, group in groups.items():
        weights = [max(g.metrics.get(DURATION, 0.0), 1e-9) for g in group]

        def mean(key: str) -> float | None:
            pairs = [(g.metrics[key], w) for g, w in zip(group, weights) if key in g.metrics]
            return sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else None

        def largest(key: str) -> float | None:
            values = [g.metrics[key] for g in group if key in g.metrics]
            return max(values) if values else None

        registers = largest(REGISTERS)
        shared = [_shared_bytes(g.metrics) for g in group if _shared_bytes(g.metrics) is not None]
        kept = {k: v for k in KEPT if (v := largest(k)) is not None}
        kept.update({k: v for k in sorted({k for g in group for k in g.metrics if k.startswith("nvl")}) if (v := mean(k)) is not None})
        verdict = next((rules[(g.pid, g.id)] for g in group if (g.pid, g.id) in rules), "")
        out[name] = KernelMetrics(
            name=name,
            launches=len(group),
            duration_us=sum(g.metrics.get(DURATION, 0.0) for g in group),
            devices=sorted({g.device for g in group}),
            sm_throughput_pct=mean(SM_THROUGHPUT),
            memory_throughput_pct=mean(MEMORY_THROUGHPUT),
            dram_throughput_pct=next((v for k in DRAM_THROUGHPUT if (v := mean(k)) is not None), None),
            achieved_occupancy_pct=mean(ACHIEVED_OCCUPANCY),
            theoretical_occupancy_pct=mean(THEORETICAL_OCCUPANCY),
            registers_per_thread=int(registers) if registers is not None else None,
            shared_mem_per_block_bytes=int(max(shared)) if shared else None,
            rule=verdict,
            metrics=kept,
        )
    return out


def _shared_bytes(metrics: dict[str, float]) -> float | None:
    if SHARED_STATIC in metrics or SHARED_DYNAMIC in metrics:
        return metrics.get(SHARED_STATIC, 0.0) + metrics.get(SHARED_DYNAMIC, 0.0)
    return metrics.get(SHARED_TOTAL)


def bottleneck(sm: float | None, memory: float | None, dram: float | None, rule: str = "") -> tuple[str, str]:
    """A label for what bounds a kernel, and where it comes from: ncu's Speed-of-Light verdict
    when there is one, else the throughputs themselves."""
    mem = max((v for v in (memory, dram) if v is not None), default=None)
    if sm is None and mem is None and not rule:
        return "", ""
    low = rule.lower()
    if "latency" in low or "low compute throughput and memory" in low:
        return "latency-bound", rule
    if "compute is more heavily utilized" in low:
        return "compute-bound", rule
    if "memory is more heavily utilized" in low:
        return _memory_label(memory, dram), rule
    derived = f"derived from Speed of Light: SM {_pct(sm)}, memory {_pct(memory)}, DRAM {_pct(dram)} of peak"
    sm_v, mem_v = sm or 0.0, mem or 0.0
    if max(sm_v, mem_v) < LATENCY_BOUND_PCT:
        label = "latency-bound"
    elif sm_v >= mem_v:
        label = "compute-bound"
    else:
        label = _memory_label(memory, dram)
    return label, rule or derived


def _memory_label(memory: float | None, dram: float | None) -> str:
    if dram is not None and (memory is None or dram >= 0.9 * memory):
        return "memory-bound (DRAM)"
    if memory is not None:
        return "memory-bound (L1/L2)"
    return "memory-bound"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"
