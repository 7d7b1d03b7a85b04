"""Per-candidate cost of an evaluation with kloom's warm rank pool against a fresh torchrun-style
launch per trial (ParallelKernelBench's way), on the same workload and world size, in one run.

    python benchmarks/eval_pool.py --world-size 2 --candidates 5 --out benchmarks/results/eval_pool_cpu.md

Both sides run the same amount of checking: 5 correctness trials and one timing run per
candidate. The target: the warm pool at least 5x cheaper per candidate, and a small CPU
workload's whole evaluation under 3 s with a warm pool.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORKLOAD = ROOT / "tests" / "evaluator" / "workloads" / "linear_allreduce.py"
CANDIDATE = ROOT / "tests" / "evaluator" / "candidates" / "correct.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_launch(world_size: int, mode: str) -> float:
    """Start ``world_size`` processes for one trial and wait for all of them; seconds taken."""
    port = free_port()
    t0 = time.perf_counter()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   LOCAL_RANK=str(rank), PYTHONPATH=str(ROOT), GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "fresh_launch_trial.py"), str(WORKLOAD), str(CANDIDATE), mode], env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        raise RuntimeError(f"a fresh launch failed: exit codes {codes}")
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from services.worker.evaluator import EvalSettings, Evaluator

    settings = EvalSettings.for_device("cpu")
    warm = []
    with Evaluator("cpu", settings) as evaluator:
        t0 = time.perf_counter()
        first = evaluator.evaluate(WORKLOAD, CANDIDATE, world_size=args.world_size)
        cold_s = time.perf_counter() - t0
        assert first.correct, first.summary()
        for _ in range(args.candidates):
            t0 = time.perf_counter()
            result = evaluator.evaluate(WORKLOAD, CANDIDATE, world_size=args.world_size)
            warm.append(time.perf_counter() - t0)
            assert result.correct, result.summary()
    fresh = []
    for _ in range(args.candidates):
        per_candidate = sum(fresh_launch(args.world_size, "check") for _ in range(settings.trials))
        per_candidate += fresh_launch(args.world_size, "time")
        fresh.append(per_candidate)
    warm_med, fresh_med = statistics.median(warm), statistics.median(fresh)
    lines = [
        "# Evaluation cost per candidate: warm rank pool vs a fresh launch per trial",
        "",
        f"Command: `python benchmarks/eval_pool.py --world-size {args.world_size} --candidates {args.candidates}`"
        + (f" (output: `{args.out}`)" if args.out else ""),
        f"Workload: `{WORKLOAD.relative_to(ROOT)}`, candidate `{CANDIDATE.relative_to(ROOT)}`, world size {args.world_size}, CPU (gloo), "
        f"{os.cpu_count()} cores; both sides run {settings.trials} correctness trials and one timing run per candidate.",
        "",
        "| | seconds per candidate (median) | all runs |",
        "|---|---|---|",
        f"| warm pool (kloom) | {warm_med:.2f} | {', '.join(f'{x:.2f}' for x in warm)} |",
        f"| fresh launch per trial | {fresh_med:.2f} | {', '.join(f'{x:.2f}' for x in fresh)} |",
        "",
        f"Warm pool is **{fresh_med / warm_med:.1f}x** cheaper per candidate (target: at least 5x). "
        f"A whole evaluation with a warm pool takes {warm_med:.2f} s (target: under 3 s); the first one, which starts the pool, took {cold_s:.2f} s.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
