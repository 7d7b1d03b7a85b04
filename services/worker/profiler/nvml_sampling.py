"""The NVML sampler's own process: ``NvmlSampler`` (``nvml.py``) starts it and reads its samples.

NVML is a C library that kloom does not control; on 2xH200 a sampling thread died with "Fatal
Python error: Aborted" in the middle of plain Python code (the heap already corrupted by an
earlier NVML call), and took the evaluator or profiler process around it down with it
(``results/gpu/h200x2-checks/``). Sampling from a process of its own confines such a crash to
this process: the caller keeps the samples taken so far and says that sampling stopped.

    python -m services.worker.profiler.nvml_sampling INTERVAL_S INDEX [INDEX ...]

Prints one JSON line first, ``{"ready": true}`` or ``{"reason": "..."}`` (NVML unusable here),
then a line per sample, ``{"t": s, "gpus": {"<index>": {...}}}``: every INTERVAL_S seconds, or
with INTERVAL_S 0 once per byte ``s`` read from stdin (on demand: the judge samples between
timed blocks, never during one, because NVML's queries stalled the CUDA calls of the processes
being timed by 10-30 ms). When its stdin closes it takes one last sample and exits. Indices are
CUDA ordinals under the inherited ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import json
import select
import sys
import time

from services.worker.profiler.nvml import NvmlUnavailable, _active_links, _open, _try, visible_handles
from services.worker.profiler.nvml_pids import compute_processes
from services.worker.profiler.nvml_quiet import sampling_allowed

_NVLINK_TX, _NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX, KiB counters


def _field_value(v) -> float:
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(v.value, kinds.get(int(v.valueType), "ullVal")))


def _nvlink_kib(nv, handle, links: list[int]) -> tuple[float | None, float | None]:
    if not links:
        return None, None
    fields = [(_NVLINK_TX, link) for link in links] + [(_NVLINK_RX, link) for link in links]
    values = _try(nv.nvmlDeviceGetFieldValues, handle, fields)
    if values is None:
        return None, None
    tx = [_field_value(v) for v in values[: len(links)] if v.nvmlReturn == 0]
    rx = [_field_value(v) for v in values[len(links) :] if v.nvmlReturn == 0]
    return (sum(tx) if tx else None), (sum(rx) if rx else None)


def sample(nv, handle, links: list[int]) -> dict:
    """One GPU's sample: utilisation, memory, clocks, power, temperature, NVLink counters, the
    compute processes and the device memory each uses."""
    util = _try(nv.nvmlDeviceGetUtilizationRates, handle)
    memory = _try(nv.nvmlDeviceGetMemoryInfo, handle)
    power = _try(nv.nvmlDeviceGetPowerUsage, handle)
    reasons = _try(nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
    if reasons is None:
        reasons = _try(nv.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    tx, rx = _nvlink_kib(nv, handle, links)
    processes = _try(compute_processes, nv, handle, default=[])
    return {
        "gpu_util_pct": util.gpu if util is not None else None,
        "mem_util_pct": util.memory if util is not None else None,
        "memory_used_gib": memory.used / 2**30 if memory is not None else None,
        "sm_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM),
        "mem_clock_mhz": _try(nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM),
        "power_w": power / 1000.0 if power is not None else None,
        "temperature_c": _try(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU),
        "clock_event_reasons": int(reasons) if reasons is not None else 0,
        "nvlink_tx_kib": tx,
        "nvlink_rx_kib": rx,
        "pids": sorted({pid for pid, _ in processes}),
        # Device memory per process (JSON keys are strings): a context's share beside its tensors.
        "process_memory": {str(pid): used for pid, used in processes if used is not None},
    }


def _say(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    interval_s, indices = float(argv[0]), [int(i) for i in argv[1:]]
    try:
        nv = _open()
    except NvmlUnavailable as exc:
        _say({"reason": str(exc)})
        return 0
    try:
        try:
            visible = visible_handles(nv)
        except nv.NVMLError as exc:
            _say({"reason": f"NVML could not list the GPUs: {exc}"})
            return 0
        missing = [i for i in indices if i >= len(visible)]
        if missing:
            _say({"reason": f"NVML has no GPU {missing}: this process's CUDA sees {len(visible)}"})
            return 0
        handles = {i: visible[i][1] for i in indices}
        links = {i: _active_links(nv, h) for i, h in handles.items()}
        started = time.monotonic()

        def emit() -> None:
            _say({"t": time.monotonic() - started, "gpus": {str(i): sample(nv, h, links[i]) for i, h in handles.items()}})

        _say({"ready": True})
        periodic = interval_s > 0
        while True:
            if periodic and sampling_allowed():  # a periodic sample waits out a judge's timing
                emit()
            readable, _, _ = select.select([sys.stdin], [], [], interval_s if periodic else None)
            if not readable:
                continue
            data = sys.stdin.buffer.read1(4096)
            if not data:
                if not periodic or sampling_allowed():
                    emit()
                return 0
            for _ in range(data.count(b"s")):  # asked for: the asker knows it is between timed spans
                emit()
    finally:
        nv.nvmlShutdown()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
