"""The PIDs of the compute processes on a GPU, read without trusting the binding's record size.

nvidia-ml-py's ``nvmlDeviceGetComputeRunningProcesses`` hands the driver an array of its own
``nvmlProcessInfo`` records; where the driver writes a larger record than the binding allocated
(the record has grown fields across NVML versions), the driver writes past the array and corrupts
the heap. This was suspected when the profiler's sampler died with SIGABRT on 2xH200, but it was
not the cause there: driver 580 writes 24-byte records, as the binding expects
(``benchmarks/gpu/nvml_stride.py``, ``results/gpu/h200x2-session19/``). It is kept as a guard
for a binding newer or older than the driver. Here the buffer is sized for records far larger
than any NVML version's, filled with a sentinel first, and the stride the driver used is read
from how many bytes it wrote. Of each record only the first two fields are read, which every
version has at the same offsets: the PID (offset 0) and the device memory the process uses
(``usedGpuMemory``, offset 8: its CUDA context, its allocator's pool, its libraries' buffers).
"""

from __future__ import annotations

import ctypes
import struct

#: Bytes reserved per record: more than any nvmlProcessInfo version writes (16, 24 or 32 so far).
RECORD_BYTES_MAX = 64
_SENTINEL = 0xAA
_SYMBOLS = ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2")


#: ``usedGpuMemory`` where the driver cannot say (NVML_VALUE_NOT_AVAILABLE).
_NOT_AVAILABLE = 2**64 - 1


def processes_from(raw: bytes, count: int) -> list[tuple[int, int | None]]:
    """(PID, device memory in bytes or None where the driver cannot say) of the ``count``
    records the driver wrote at the start of a sentinel-filled ``raw``."""
    if count <= 0:
        return []
    written = len(raw.rstrip(bytes([_SENTINEL])))
    # Records are 8-byte aligned: a last field whose top bytes happen to equal the sentinel
    # shortens ``written`` by less than 8, which rounding up to the record's size absorbs.
    stride = (-(-written // count) + 7) // 8 * 8 or 8
    if stride * count > len(raw):
        raise ValueError(f"the driver wrote {written} bytes for {count} records: more than reserved")
    out = []
    for i in range(count):
        pid = struct.unpack_from("I", raw, i * stride)[0]
        used = struct.unpack_from("Q", raw, i * stride + 8)[0] if stride >= 16 else _NOT_AVAILABLE
        out.append((pid, None if used == _NOT_AVAILABLE else used))
    return out


def compute_processes(nv, handle, attempts: int = 4) -> list[tuple[int, int | None]]:
    """(PID, device memory in bytes or None) of each compute process on ``handle`` (pynvml module
    ``nv``, initialised).

    Raises ``nv.NVMLError`` as the binding's own query does (not supported, GPU lost, ...).
    """
    fn = None
    for symbol in _SYMBOLS:
        try:
            fn = nv._nvmlGetFunctionPointer(symbol)
            break
        except nv.NVMLError:
            continue
    if fn is None:
        raise nv.NVMLError(nv.NVML_ERROR_FUNCTION_NOT_FOUND)
    count = ctypes.c_uint(0)
    ret = fn(handle, ctypes.byref(count), None)
    for _ in range(attempts):
        if ret == nv.NVML_SUCCESS and count.value == 0:
            return []
        if ret not in (nv.NVML_SUCCESS, nv.NVML_ERROR_INSUFFICIENT_SIZE):
            raise nv.NVMLError(ret)
        capacity = count.value * 2 + 8  # processes may start between the two calls
        buffer = ctypes.create_string_buffer(bytes([_SENTINEL]) * (capacity * RECORD_BYTES_MAX))
        count.value = capacity
        ret = fn(handle, ctypes.byref(count), buffer)
        if ret == nv.NVML_SUCCESS:
            return processes_from(buffer.raw[: capacity * RECORD_BYTES_MAX], count.value)
    raise nv.NVMLError(ret)
