"""Which NVML query aborts the profiler's sampler (tests/services/worker/profiler on 2 H200s: "Fatal
Python error: Aborted" in NvmlSampler._sample while the profiled ranks ran). With CUDA processes
running on every GPU, each query the sampler makes runs 300 times in a process of its own; the
exit status says which one brings the process down.

    python3 benchmarks/gpu/nvml_probe.py
"""
from __future__ import annotations

import subprocess
import sys
import time

BUSY = "import torch,sys; d=int(sys.argv[1]); x=torch.randn(4096,4096,device=d)\nwhile True: x=(x@x).tanh()"
QUERY = r"""
import sys, pynvml as nv
nv.nvmlInit()
name = sys.argv[1]
handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
links = range(nv.NVML_NVLINK_MAX_LINKS)
fields = [(138, l) for l in links] + [(139, l) for l in links]  # NVLink throughput TX / RX (the sampler's)
calls = {
    "processes": lambda h: nv.nvmlDeviceGetComputeRunningProcesses(h),
    "fields": lambda h: nv.nvmlDeviceGetFieldValues(h, fields),
    "utilization": lambda h: nv.nvmlDeviceGetUtilizationRates(h),
    "memory": lambda h: nv.nvmlDeviceGetMemoryInfo(h),
    "power": lambda h: nv.nvmlDeviceGetPowerUsage(h),
    "reasons": lambda h: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
}
out = None
for _ in range(300):
    for h in handles:
        try:
            out = calls[name](h)
        except nv.NVMLError as exc:
            out = exc
print(name, "ok", repr(out)[:300])
"""


def main() -> None:
    import torch

    busy = [subprocess.Popen([sys.executable, "-c", BUSY, str(d)]) for d in range(torch.cuda.device_count()) for _ in range(2)]
    time.sleep(15)
    try:
        for name in ("processes", "fields", "utilization", "memory", "power", "reasons"):
            run = subprocess.run([sys.executable, "-c", QUERY, name], capture_output=True, text=True, timeout=120)
            print(f"{name}: exit {run.returncode}; {run.stdout.strip()[:400]} {run.stderr.strip()[-600:]}", flush=True)
    finally:
        for p in busy:
            p.kill()


if __name__ == "__main__":
    main()
