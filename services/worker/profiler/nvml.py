"""NVML (nvidia-ml-py): the GPUs a worker has, and how they behaved while a candidate ran.

``gpu_inventory()`` describes each GPU (model, memory, driver, how it is joined to every other
GPU) for the worker's heartbeat. ``NvmlSampler`` samples utilisation, memory, clocks, power,
temperature and NVLink traffic from a process of its own during timing, and flags a run whose
clocks were held back or whose GPU also ran someone else's process.

``pynvml`` is imported lazily; without it, without a driver, or on a CPU machine every entry
point returns an explicit ``{"status": "unavailable", "reason": ...}`` instead of failing.
"""

from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kloom.processes import descendants, exit_description

#: The repository root, where the sampler's process imports its module from.
_ROOT = str(Path(__file__).resolve().parents[3])

#: Clock event (throttle) reason bits, from nvml.h.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: nvmlDeviceGetTopologyCommonAncestor levels, named as ``nvidia-smi topo -m`` names them.
TOPOLOGY_LEVELS = {0: "same board", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why."""


def unavailable(reason: str) -> dict[str, Any]:
    return {"status": "unavailable", "reason": reason}


def _open():
    """The initialised pynvml module (pair every call with ``nvmlShutdown``)."""
    try:
        import pynvml  # optional: nvidia-ml-py (a service extra)
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py (pynvml) is not installed") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        raise NvmlUnavailable("NVML library not found: no NVIDIA driver on this machine") from None
    except pynvml.NVMLError_DriverNotLoaded:
        raise NvmlUnavailable("the NVIDIA driver is not loaded") from None
    except pynvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not start: {exc}") from None
    return pynvml


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _try(fn, *args, default=None):
    """An NVML query, or ``default`` where the device does not support it."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: the value is absent
        return default


def _active_links(nv, handle) -> list[int]:
    links = []
    for link in range(nv.NVML_NVLINK_MAX_LINKS):
        if _try(nv.nvmlDeviceGetNvLinkState, handle, link) == nv.NVML_FEATURE_ENABLED:
            links.append(link)
    return links


def visible_handles(nv) -> list[tuple[int, Any]]:
    """``(NVML index, handle)`` of the GPUs this process's CUDA sees, in CUDA ordinal order.

    NVML numbers every GPU of the machine; CUDA only those ``CUDA_VISIBLE_DEVICES`` names, renumbered
    from 0. A worker given GPUs 2,3 runs its ranks on ``cuda:0`` and ``cuda:1``, which NVML calls 2
    and 3: sampling NVML's 0 and 1 would watch another worker's GPUs (and flag its processes as
    another's). Entries are indices (CUDA's order, which is PCI bus order on machines of one GPU
    model) or ``GPU-...`` UUIDs; as in CUDA, the list ends at the first entry that names no GPU.
    """
    count = nv.nvmlDeviceGetCount()
    names = os.environ.get("CUDA_VISIBLE_DEVICES")
    if names is None:
        return [(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    uuids = {}
    for i in range(count):
        handle = nv.nvmlDeviceGetHandleByIndex(i)
        uuids[_text(_try(nv.nvmlDeviceGetUUID, handle, default=""))] = (i, handle)
    found: list[tuple[int, Any]] = []
    for name in (n.strip() for n in names.split(",")):
        if name.isdigit() and int(name) < count:
            entry = (int(name), nv.nvmlDeviceGetHandleByIndex(int(name)))
        else:
            entry = next((v for u, v in uuids.items() if u and name.startswith("GPU-") and u.startswith(name)), None)
        if entry is None or entry in found:
            break
        found.append(entry)
    return found


def _remote_bus(nv, handle, link: int) -> str:
    """PCI bus of what an NVLink leads to: a peer GPU, or an NVSwitch."""
    info = _try(nv.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
    return _text(info.busId).lower() if info is not None else ""


def gpu_inventory() -> list[dict[str, Any]]:
    """One entry per GPU: model, memory, driver, PCI bus, active NVLinks and, for every other GPU,
    how the two are joined (``NV18``: over 18 NVLinks, directly or through NVSwitch; otherwise
    the PCIe level as ``nvidia-smi topo -m`` prints it: PIX, PXB, PHB, NODE, SYS).

    Without NVML, a single entry ``{"status": "unavailable", "reason": ...}``.
    """
    try:
        nv = _open()
    except NvmlUnavailable as exc:
        return [unavailable(str(exc))]
    try:
        driver = _text(nv.nvmlSystemGetDriverVersion())
        visible = visible_handles(nv)
        handles = [h for _, h in visible]
        buses = [_text(nv.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
        links = [_active_links(nv, h) for h in handles]
        gpus = []
        for i, handle in enumerate(handles):
            remote = [_remote_bus(nv, handle, link) for link in links[i]]
            topology = {}
            for j, other in enumerate(handles):
                if j == i:
                    continue
                direct = sum(1 for bus in remote if bus == buses[j])
                if direct:
                    topology[str(j)] = f"NV{direct}"
                elif links[i] and _try(nv.nvmlDeviceGetP2PStatus, handle, other, nv.NVML_P2P_CAPS_INDEX_NVLINK) == nv.NVML_P2P_STATUS_OK:
                    topology[str(j)] = f"NV{len(links[i])}"
                else:
                    level = _try(nv.nvmlDeviceGetTopologyCommonAncestor, handle, other)
                    topology[str(j)] = TOPOLOGY_LEVELS.get(level, "unknown")
            memory = nv.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "status": "ok",
                    "index": i,  # CUDA's ordinal in this process (``cuda:i``)
                    "nvml_index": visible[i][0],
                    "name": _text(nv.nvmlDeviceGetName(handle)),
                    "uuid": _text(_try(nv.nvmlDeviceGetUUID, handle, default="")),
                    "pci_bus_id": buses[i],
                    "memory_total_gib": round(memory.total / 2**30, 1),
                    "driver": driver,
                    "nvlink_active_links": len(links[i]),
                    "topology": topology,
                }
            )
        return gpus
    except nv.NVMLError as exc:
        return [unavailable(f"NVML query failed: {exc}")]
    finally:
        nv.nvmlShutdown()


def _ended(code: int) -> str:
    return f"ended with {exit_description(code)}"


class NvmlSampler:
    """Samples the given GPUs every ``interval_s`` seconds while its block runs.

    ``with NvmlSampler([0, 1]) as sampler: ...`` then ``sampler.summary()``: the indices are CUDA
    ordinals (``cuda:0``, ``cuda:1`` under this process's ``CUDA_VISIBLE_DEVICES``). Processes on a GPU
    that are neither this process nor one of its descendants count as another's; processes whose
    PID this machine cannot see (another PID namespace) are listed as unattributed.

    NVML runs in a process of its own (``nvml_sampling.py``): a crash inside NVML ends the
    sampling, not the caller; the summary keeps what was sampled and says why it stopped.
    """

    #: How long the sampler's process may take to open NVML before sampling counts as unavailable.
    START_TIMEOUT_S = 30.0

    def __init__(self, device_indices: Sequence[int], interval_s: float | None = 0.05):
        self.device_indices = list(device_indices)
        self.interval_s = interval_s  # None: on ``sample()`` only (and once as the block ends)
        self.samples: dict[int, list[dict[str, Any]]] = {i: [] for i in self.device_indices}
        self.reason = ""
        self.stopped = ""  # why sampling ended before the block did (its process died)
        self._proc: subprocess.Popen | None = None
        self._ours: set[int] = set()
        self._ownership: dict[int, str] = {}
        self._thread: threading.Thread | None = None
        self._arrived = threading.Condition()
        self._count = 0

    def _command(self) -> list[str]:
        return [sys.executable, "-m", "services.worker.profiler.nvml_sampling", str(self.interval_s or 0), *map(str, self.device_indices)]

    def sample(self, timeout_s: float = 5.0) -> None:
        """Take one sample now and wait for it: on demand, between timed spans (NVML's queries
        stall other processes' CUDA calls while they run). Nothing once sampling has stopped."""
        proc, thread = self._proc, self._thread
        if proc is None or thread is None or self.stopped:
            return
        with self._arrived:
            want = self._count + 1
            try:
                proc.stdin.write(b"s")
                proc.stdin.flush()
            except (OSError, ValueError):
                return
            answered = self._arrived.wait_for(lambda: self._count >= want or not thread.is_alive(), timeout=timeout_s)
        if not answered:  # a hung NVML costs the caller one wait, not one per block
            self.stopped = f"NVML sampling stopped early: a sample took more than {timeout_s:g} s"
            proc.kill()

    def begin_window(self) -> None:
        """Summarise from here on: the samples and the processes seen so far are dropped (a
        sampler kept open across evaluations: starting its process costs ~0.15 s each time)."""
        with self._arrived:
            self.samples = {i: [] for i in self.device_indices}
            self._ownership = {}

    @property
    def open(self) -> bool:
        """Its process runs and samples (not unavailable, not stopped early)."""
        return self._proc is not None and not self.reason and not self.stopped

    def __enter__(self) -> "NvmlSampler":
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")])))
        try:
            self._proc = subprocess.Popen(self._command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        except OSError as exc:
            self.reason = f"the NVML sampler could not start: {exc}"
            return self
        first = self._first_line()
        if first.get("ready") is not True:
            self.reason = str(first.get("reason") or "the NVML sampler did not start")
            self._end()
            return self
        self._thread = threading.Thread(target=self._read, name="kloom-nvml", daemon=True)
        self._thread.start()
        return self

    def _first_line(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], self.START_TIMEOUT_S)
        if not ready:
            return {"reason": f"the NVML sampler did not answer within {self.START_TIMEOUT_S:g} s"}
        line = self._proc.stdout.readline()
        try:
            return json.loads(line) if line else {"reason": f"the NVML sampler exited ({_ended(self._proc.wait())}) before sampling"}
        except ValueError:
            return {"reason": f"the NVML sampler said {line[:200]!r}"}

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            for key, sample in record.get("gpus", {}).items():
                index = int(key)
                if index not in self.samples:
                    continue
                for pid in sample.get("pids", []):
                    # Judged while the process runs: ours may have exited by the time of summary().
                    if pid not in self._ownership:
                        self._ownership[pid] = self._owner(pid)
                self.samples[index].append({"t": record.get("t", 0.0), **sample})
            with self._arrived:
                self._count += 1
                self._arrived.notify_all()
        with self._arrived:
            self._arrived.notify_all()

    def __exit__(self, *exc) -> None:
        if self._proc is None:
            return
        code = self._end()
        if self._thread is not None:
            self._thread.join(timeout=10)
            if code not in (0, None) and not self.stopped:
                self.stopped = f"NVML sampling stopped early: its process {_ended(code)}"

    def _end(self) -> int | None:
        """Close the sampler's stdin (it samples once more and exits), then wait for it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        try:
            proc.stdin.close()
        except OSError:
            pass
        try:
            return proc.wait(timeout=max(5.0, 20 * (self.interval_s or 0)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None

    def _owner(self, pid: int) -> str:
        if pid not in self._ours:
            self._ours = {os.getpid(), *descendants(os.getpid())}
        if pid in self._ours:
            return "ours"
        return "other" if os.path.exists(f"/proc/{pid}") else "unattributed"

    def summary(self) -> dict[str, Any]:
        """Per GPU: min / median / max of every sampled quantity, NVLink throughput in GB/s, the
        clock event reasons seen, and others' processes; plus the run's flags."""
        if self.reason:
            return unavailable(self.reason)
        summary = summarise_samples(self.samples, self._ownership, self.interval_s)
        if self.stopped:
            summary["stopped"] = self.stopped
            summary["flags"].append(f"nvml_sampling_stopped: {self.stopped}")
        return summary


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _our_memory(rows: list[dict[str, Any]], ours: set[int]) -> dict[str, Any]:
    """How much device memory this process's own processes used (NVML's per-process count: each
    one's CUDA context, its allocator's pool, its libraries' buffers; what the allocator peaks
    that the evaluator records do not see): the largest any of them used, by PID, and the most
    they used together in one sample, with how many there were then. Empty where NVML gave no
    per-process memory."""
    by_pid: dict[str, float] = {}
    most, count = 0.0, 0
    for r in rows:
        used = {pid: b / 2**30 for pid, b in (r.get("process_memory") or {}).items() if int(pid) in ours}
        for pid, gib in used.items():
            by_pid[pid] = max(by_pid.get(pid, 0.0), gib)
        together = sum(used.values())
        if together > most:
            most, count = together, len(used)
    if not by_pid:
        return {}
    return {"max_gib_by_pid": by_pid, "most_together_gib": most, "processes_then": count}


def summarise_samples(samples: dict[int, list[dict[str, Any]]], ownership: dict[int, str], interval_s: float) -> dict[str, Any]:
    """The summary of NVML samples per GPU (``NvmlSampler.summary``'s arithmetic).

    ``ownership`` maps each PID seen to ``ours``, ``other`` or ``unattributed``. Clocks count as
    throttled when any clock event reason other than idle was seen.
    """
    devices: dict[str, Any] = {}
    flags: list[str] = []
    for index, rows in samples.items():
        out: dict[str, Any] = {"samples": len(rows)}
        for key in ("gpu_util_pct", "mem_util_pct", "memory_used_gib", "sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c"):
            values = [r[key] for r in rows if r.get(key) is not None]
            if values:
                out[key] = _stats(values)
        for key, name in (("nvlink_tx_kib", "nvlink_tx_gbps"), ("nvlink_rx_kib", "nvlink_rx_gbps")):
            rates = [
                (b[key] - a[key]) * 1024 / (b["t"] - a["t"]) / 1e9
                for a, b in zip(rows, rows[1:])
                if a.get(key) is not None and b.get(key) is not None and b["t"] > a["t"] and b[key] >= a[key]
            ]
            if rates:
                out[name] = _stats(rates)
        seen = 0
        for r in rows:
            seen |= int(r.get("clock_event_reasons") or 0)
        reasons = [name for bit, name in CLOCK_EVENT_REASONS.items() if seen & bit]
        out["clock_event_reasons"] = reasons
        throttles = [r for r in reasons if r != "gpu_idle"]
        if throttles:
            flags.append(f"clocks_throttled: GPU {index}: {', '.join(throttles)}")
        pids = sorted({p for r in rows for p in r.get("pids", [])})
        out["other_processes"] = [p for p in pids if ownership.get(p) == "other"]
        out["unattributed_processes"] = [p for p in pids if ownership.get(p) == "unattributed"]
        ours = _our_memory(rows, {p for p in pids if ownership.get(p) == "ours"})
        if ours:
            out["our_processes"] = ours
        if out["other_processes"]:
            flags.append(f"gpu_busy_with_another_process: GPU {index}: pid {', '.join(map(str, out['other_processes']))}")
        devices[str(index)] = out
    return {
        "status": "ok",
        "interval_s": interval_s,
        "devices": devices,
        "throttled": any(f.startswith("clocks_throttled") for f in flags),
        "busy_with_other_process": any(f.startswith("gpu_busy_with_another_process") for f in flags),
        "flags": flags,
    }
