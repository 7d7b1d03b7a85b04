"""Where the judge's timing phase spends its time, evaluation by evaluation: each block's wall
time on the judge's clock and the side's own loop, draw, call and projection totals, beside the
time spent around the blocks (stopping the other side, the NVML sample between blocks, handing a
round's outputs over and judging them). The judge's per-candidate cost (benchmarks/judge_cost.py)
shows the phase; this shows what inside it to cut.

    python3 benchmarks/gpu/judge_blocks.py --device cuda --runs 3 [--workload W --candidate C] [--world-size 1]

``--candidate copy``: the workload's own ``Model`` as the candidate (its source, then a
``ModelNew`` that subclasses it), for any workload, a KernelBench problem say.
"""
from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import time
from collections import defaultdict

from services.worker.evaluator import EvalSettings, Evaluator, interleaved, judge, judge_trials
from services.worker.evaluator.pool import RankPool

SPENT: dict[str, float] = defaultdict(float)
COUNT: dict[str, int] = defaultdict(int)
BLOCKS: list[dict] = []


def _spy(owner, name: str, label: str) -> None:
    """Add the wall time of every call of ``owner.name`` to SPENT[label]."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            SPENT[label] += time.perf_counter() - t0
            COUNT[label] += 1

    setattr(owner, name, timed)


def _spy_requests() -> None:
    """Every pool request by op ("request <op>"): the trials, timing inputs and comparisons."""
    original = RankPool.request

    @functools.wraps(original)
    def request(self, op, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(self, op, *args, **kwargs)
        finally:
            label = f"request {op} ({self.role})"
            SPENT[label] += time.perf_counter() - t0
            COUNT[label] += 1

    RankPool.request = request


def _spy_blocks() -> None:
    original = interleaved.Timing._block

    def block(self, side, other, iters, warm, *args, **kwargs):
        t0 = time.perf_counter()
        got = original(self, side, other, iters, warm, *args, **kwargs)
        ranks = [p for _, p in sorted((got.phases or {}).items()) if p]
        BLOCKS.append({"side": side.role, "calls": iters + warm, "total_ms": (time.perf_counter() - t0) * 1e3,
                       "wall_ms": got.wall_ms, "reported_ms": got.reported_ms,
                       **{k: max((p.get(k, 0.0) for p in ranks), default=0.0) for k in ("loop", "draw", "call", "project")}})
        return got

    interleaved.Timing._block = block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--workload", default="tests/evaluator/workloads/linear_allreduce.py")
    parser.add_argument("--candidate", default="tests/evaluator/candidates/correct.py", help="a candidate file, or copy (the workload's Model)")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None, help="a JSON file for every evaluation's rows")
    parser.add_argument("--spares", type=int, default=None, help="candidate pools begun ahead (default: the device's setting)")
    parser.add_argument("--profile", type=int, default=0, help="cProfile the last evaluation and print this many functions by cumulative time")
    args = parser.parse_args()
    _spy_blocks()
    _spy(RankPool, "stop", "stop other side")
    _spy(RankPool, "resume", "resume")
    _spy(interleaved.Timing, "_handed_outputs", "hand over a round's outputs")
    _spy(interleaved.Timing, "_check", "clock check")
    _spy(judge_trials.Trials, "_judge_timed", "judge a round's outputs")
    _spy(judge.JudgePools, "place_for_timing", "place for timing")
    _spy(judge.JudgePools, "unplace", "unplace")
    _spy(judge.JudgePools, "stop_spares", "stop spares")
    _spy(judge.JudgePools, "resume_spares", "resume spares")
    _spy(judge_trials, "paired_interval", "speedup interval")
    _spy_requests()
    from services.worker.profiler import nvml

    _spy(nvml.NvmlSampler, "sample", "NVML sample between blocks")
    _spy(nvml.NvmlSampler, "__enter__", "NVML sampler start")
    _spy(nvml.NvmlSampler, "begin_window", "NVML sampler window")
    rows = []
    overrides = {} if args.spares is None else {"spare_candidate_pools": args.spares}
    with Evaluator(args.device, EvalSettings.for_device(args.device, **overrides)) as ev:
        for run in range(args.runs + 1):  # the first starts the pools
            SPENT.clear()
            COUNT.clear()
            BLOCKS.clear()
            profiler = cProfile.Profile() if args.profile and run == args.runs else None
            if profiler is not None:
                profiler.enable()
            if args.candidate == "copy":
                copy = open(args.workload).read() + "\n\nclass ModelNew(Model):\n    pass\n"
                r = ev.evaluate(args.workload, candidate_source=copy, world_size=args.world_size, more_after=args.runs - run)
            else:
                r = ev.evaluate(args.workload, args.candidate, world_size=args.world_size, more_after=args.runs - run)
            if profiler is not None:
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(args.profile)
            row = {"run": run, "status": r.status, "phases": {k: round(v, 3) for k, v in r.phase_seconds.items()},
                   "around_blocks_s": {k: [round(v, 4), COUNT[k]] for k, v in SPENT.items()},
                   "blocks": [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in b.items()} for b in BLOCKS]}
            rows.append(row)
            blocks_total = sum(b["total_ms"] for b in BLOCKS) / 1e3
            walls = sum(b["wall_ms"] for b in BLOCKS) / 1e3
            calls = sum(b["calls"] for b in BLOCKS)
            sums = {k: sum(b[k] for b in BLOCKS) / 1e3 for k in ("loop", "draw", "call", "project", "reported_ms")}
            print(f"run {run}: {r.status} phases {row['phases']}")
            print(f"  {len(BLOCKS)} blocks, {calls} calls: blocks {blocks_total:.3f} s, of which the judge's wall {walls:.3f} s; "
                  f"the sides' own loop {sums['loop']:.3f} s (draw {sums['draw']:.3f}, call {sums['call']:.3f}, "
                  f"project {sums['project']:.3f}; reported {sums['reported_ms']:.3f})")
            print("  around the blocks: " + ", ".join(f"{k} {v[0]:.3f} s ({v[1]}x)" for k, v in row["around_blocks_s"].items()))
            if args.out:
                with open(args.out, "w") as f:
                    json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
