"""A profile in a few lines the planner and the verifier can read: the profiler writes it into
``Profile.summary``, and the batch report writes it again from a stored profile (older profiles
gain the newer lines). Standard library only, like the records it reads."""

from __future__ import annotations

from kloom.profile import KernelStat, Profile, kernel_key

_NAME_LIMIT = 60
#: Kernels below this share of the time are left out of the summary (they stay in the profile).
_MIN_SHARE = 0.01


def short_name(name: str) -> str:
    """A kernel name an agent can read: templated C++ names cut to their function name."""
    bare = kernel_key(name) if ("<" in name or "(" in name) else name
    return bare if len(bare) <= _NAME_LIMIT else bare[: _NAME_LIMIT - 3] + "..."


def duration(us: float) -> str:
    return f"{us / 1000:.3g} ms" if us >= 1000 else f"{us:.3g} us"


def kernel_line(k: KernelStat, unit: str) -> str:
    label = {"gemm": "GEMM ", "attention": "attention ", "communication": ""}.get(k.category, "")
    line = f"{label}{short_name(k.name)} {k.share:.0%} of {unit} time ({k.calls} calls, mean {duration(k.mean_us)})"
    if k.communication:
        return line + ": communication"
    numbers = []
    if k.sm_throughput_pct is not None:
        numbers.append(f"SM {k.sm_throughput_pct:.0f}%")
    if k.dram_throughput_pct is not None:
        numbers.append(f"DRAM {k.dram_throughput_pct:.0f}%")
    elif k.memory_throughput_pct is not None:
        numbers.append(f"memory {k.memory_throughput_pct:.0f}%")
    if numbers:
        line += ", " + " / ".join(numbers) + " of peak"
    if k.achieved_occupancy_pct is not None:
        line += f", occupancy {k.achieved_occupancy_pct:.0f}%"
    if k.bottleneck:
        line += f": {k.bottleneck}"
    return line


#: A step whose GPU idles this share of its time is bound by the host (launches, synchronisation).
HOST_BOUND_IDLE = 0.3
#: A step whose collectives are this share of GPU busy time, not overlapped, is bound by communication.
COMM_BOUND_EXPOSED = 0.5


def verdict(p: Profile) -> str | None:
    """One line: what bounds the step as a whole (the host, communication, or its top compute
    kernel and what ncu says bounds that), then the other shares worth knowing; None when the
    profile has no kernels to judge."""
    if p.status != "ok" or not p.kernels:
        return None
    gpu = p.device == "cuda"
    exposed, idle = p.exposed_communication_share or 0.0, p.idle_share or 0.0
    top = next(iter(p.top(1, communication=False)), None)
    if gpu and idle >= HOST_BOUND_IDLE:
        main, kind = f"the host: the GPU idles {idle:.0%} of the step (launch overhead or host synchronisation)", "host"
    elif exposed >= COMM_BOUND_EXPOSED:
        main, kind = f"communication: {exposed:.0%} of {'GPU ' if gpu else ''}busy time in collectives not overlapped with compute", "comm"
    elif top is not None:
        unit = "GPU" if gpu else "CPU operator"
        how = top.bottleneck if top.bottleneck and top.bottleneck != "communication" else ("no hardware counters" if gpu else "")
        main, kind = f"its top kernel, {short_name(top.name)} ({top.share:.0%} of {unit} time){', ' + how if how else ''}", "compute"
    else:
        return None
    extras = []
    if kind != "comm" and exposed >= 0.1:
        extras.append(f"exposed communication {exposed:.0%}")
    if gpu and kind != "host" and idle >= 0.1:
        extras.append(f"GPU idle {idle:.0%}")
    return "bound by " + main + "".join(f"; {e}" for e in extras)


def summarise(p: Profile, kernels: int = 3) -> str:
    """What bounds the step (a verdict line), its top kernels, what share of time is
    communication, what share is exposed, and anything that makes the numbers doubtful."""
    lines: list[str] = []
    gpu = p.device == "cuda"
    unit = "GPU" if gpu else "CPU operator"
    line = verdict(p)
    if line:
        lines.append(line)
    if p.status != "ok" or not p.kernels:
        lines.append(f"profile {p.status} ({p.tool}): {p.reason}" if p.reason else f"profile {p.status} ({p.tool})")
    elif p.tool != "ncu" and gpu:
        lines.append(f"kernel times from the PyTorch profiler, no hardware counters: {p.reason}")
    compute = [k for k in p.top(kernels, communication=False) if k.share >= _MIN_SHARE]
    comm = [k for k in p.top(1, communication=True) if k.share >= _MIN_SHARE]
    lines += [kernel_line(k, unit) for k in compute]
    lines += [kernel_line(k, unit) for k in comm]
    if p.communication_share is not None:
        where = "GPU busy time" if gpu else "busy time"
        line = (
            f"communication {p.communication_share:.0%} of {where}, {p.exposed_communication_share:.0%} exposed "
            f"(not overlapped with compute; worst of {len(p.timelines)} ranks)"
        )
        if p.idle_share is not None and p.idle_share >= 0.05:
            line += f"; {'GPU' if gpu else 'rank'} idle {p.idle_share:.0%} of the step" + (" (launch-bound?)" if gpu and p.idle_share >= 0.3 else "")
        lines.append(line)
    if p.link.get("tx_gbps_max") is not None:
        lines.append(f"NVLink traffic up to {p.link['tx_gbps_max']:.0f} GB/s out, {p.link.get('rx_gbps_max', 0.0):.0f} GB/s in per GPU ({p.link.get('source', '')})")
    lines += [f"flag: {f}" for f in p.flags]
    return "\n".join(lines)
