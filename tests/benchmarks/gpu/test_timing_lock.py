"""The GPU benchmark's timing lock: a kernel configuration compiles outside it, and its
autotuning benchmark (Triton's or inductor's) runs inside it; the process that holds it may take
it again (a candidate's call can autotune while our timing holds the lock)."""

from torch._inductor.runtime import benchmarking
from triton.runtime import autotuner

from benchmarks.gpu.timing_lock import GpuLock, time_alone


class RecordingLock:
    def __init__(self, events):
        self.events = events

    def acquire(self):
        self.events.append("acquire")

    def release(self):
        self.events.append("release")


def test_autotuning_compiles_outside_the_lock_and_benchmarks_inside_it(monkeypatch):
    monkeypatch.setattr(autotuner.Autotuner, "do_bench", autotuner.Autotuner.do_bench)
    for name in ("benchmark", "benchmark_gpu", "benchmark_gpu_with_cuda_graph"):
        monkeypatch.setattr(benchmarking.benchmarker, name, getattr(benchmarking.benchmarker, name))
    events = []
    lock = GpuLock(RecordingLock(events))
    assert {"triton autotuner", "inductor benchmark"} <= set(time_alone(lock))

    class Tuner:  # what the hooked property reads of an Autotuner
        @staticmethod
        def _do_bench(kernel_call, quantiles):
            events.append("bench")
            kernel_call()
            return [1.0]

    bench = autotuner.Autotuner.do_bench.fget(Tuner())
    assert bench(lambda: events.append("run"), quantiles=(0.5,)) == [1.0]
    assert events == ["run", "acquire", "bench", "run", "release"]

    events.clear()
    with lock:
        benchmarking.benchmarker.benchmark(lambda: events.append("run"), device="cpu", warmup=0, rep=1)
    assert events[0] == "acquire" and events[-1] == "release" and events.count("acquire") == 1
