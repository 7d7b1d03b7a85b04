"""Where a kernel candidate's time goes, outside the judge: a job's ``best_kernel.py`` against its
workload's reference on one GPU, timed three ways side by side in one run.

- ``do_bench``: Triton's benchmark (L2 flushed between calls, median): the device time of a call
  whose host work overlaps the previous call's;
- ``back-to-back``: CUDA events around 20 calls issued without a synchronisation;
- ``from idle``: each call alone, synchronised before and after, host clock (as the judge times a
  call: host work counts);
- ``timer``: the evaluator's own instrument (``services/worker/evaluator/timing.py``: ``Timer``,
  the L2 flushed before each call), as ``benchmarks/gpu/kernelbench_problem.py`` times eager and
  the compile modes. Beside the judge's figure for the same candidate it tells what the judge's
  setting (a sandboxed rank on cores of its own, inputs drawn afresh) adds.

It also prints the configurations the GEMM autotuner chose (``gemm_tuned_configs`` of the
embedded kernel), so a judge's time far from ``do_bench``'s can be told apart from a poor pick.

    python benchmarks/gpu/kernel_call_cost.py WORKLOAD.py best_kernel.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def load(path: Path, name: str) -> dict:
    """The file run as module ``name`` (registered, as dataclasses in embedded kernels need)."""
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)  # a benchmark of our own job's output
    return module.__dict__


def times(fn) -> dict:
    fn()
    torch.cuda.synchronize()
    bench = float(triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median"))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        fn()
    end.record()
    torch.cuda.synchronize()
    idle = []
    for _ in range(30):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        idle.append((time.perf_counter() - t0) * 1e3)
    from services.worker.evaluator.timing import Timer

    samples = sorted(Timer(torch.device("cuda"), 0).measure(fn, restore=None, warmup=3, min_iters=10, max_iters=200, budget_s=2.0))
    return {"do_bench_ms": bench, "back_to_back_ms": start.elapsed_time(end) / 20, "from_idle_ms": statistics.median(idle),
            "timer_ms": samples[len(samples) // 2]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload", type=Path)
    ap.add_argument("kernel", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    problem = load(args.workload, "kloom_probe_workload")
    torch.manual_seed(0)
    ref = problem["Model"](*problem["get_init_inputs"]()).cuda()
    cand_ns = load(args.kernel, "kloom_probe_candidate")
    new = cand_ns["ModelNew"](*problem["get_init_inputs"]()).cuda()
    new.load_state_dict(ref.state_dict())
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem["get_inputs"]()]
    with torch.no_grad():
        want, got = ref(*inputs), new(*inputs)
        error = float(torch.linalg.vector_norm((got - want).double()) / torch.linalg.vector_norm(want.double()))
        row = {"workload": args.workload.name, "error_vs_reference": error,
               "reference": times(lambda: ref(*inputs)), "candidate": times(lambda: new(*inputs))}
    tuned = cand_ns.get("gemm_tuned_configs")
    row["tuned"] = tuned() if tuned else []
    print(json.dumps(row, indent=1))
    if args.out:
        args.out.write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
