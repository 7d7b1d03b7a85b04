"""One GPU shared by several benchmark processes: they compile in parallel, and every measurement
runs alone. ``GpuLock`` wraps a lock of the ``multiprocessing`` context the processes were
started from; ``time_alone`` makes the benchmarking inside Triton's autotuner and inductor's
(its runtime autotuning and max-autotune's choice) take it too, so a kernel compiled in one
process is autotuned while no other process times anything, and its compilation does not wait.

Imports torch, triton and the standard library only (it runs on the GPU machine).
"""

from __future__ import annotations


class GpuLock:
    """A cross-process lock that the process holding it may take again (our timing holds it
    while a candidate's call can autotune)."""

    def __init__(self, lock):
        self._lock = lock
        self._depth = 0

    def __enter__(self):
        if self._depth == 0:
            self._lock.acquire()
        self._depth += 1
        return self

    def __exit__(self, *exc):
        self._depth -= 1
        if self._depth == 0:
            self._lock.release()
        return False


def time_alone(lock: GpuLock) -> list[str]:
    """Hook the autotuners' benchmarking to run under ``lock``; the names of what was hooked
    (a hook that the installed versions do not allow is left out, and the caller says so)."""
    hooked = []
    try:
        from triton.runtime import autotuner, driver

        def do_bench(self):
            inner = self._do_bench or driver.active.get_benchmarker()

            def bench(kernel_call, quantiles):
                kernel_call()  # compiles this configuration (and runs it once) outside the lock
                with lock:
                    return inner(kernel_call, quantiles=quantiles)

            return bench

        autotuner.Autotuner.do_bench = property(do_bench)
        hooked.append("triton autotuner")
    except (ImportError, AttributeError):
        pass
    try:
        from torch._inductor.runtime import benchmarking

        bench = benchmarking.benchmarker
        for name in ("benchmark", "benchmark_gpu", "benchmark_gpu_with_cuda_graph"):
            original = getattr(bench, name, None)
            if original is None:
                continue

            def locked(*args, _original=original, **kwargs):
                with lock:
                    return _original(*args, **kwargs)

            setattr(bench, name, locked)
            hooked.append(f"inductor {name}")
    except (ImportError, AttributeError):
        pass
    return hooked
