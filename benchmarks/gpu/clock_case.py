"""Why the judge's clock cross-check rejects an overlap path (tests/agents/test_overlap.py on
2xH200: ``tp_gemm_reducescatter`` forced to ``cublas`` left ~8 ms a call unaccounted). Evaluates
suite workloads with one overlap way forced, ``--runs`` times each, and prints every timing
round's block: the judge's wall time and the side's own reported time, reference beside candidate.

    python3 benchmarks/gpu/clock_case.py tp_gemm_reducescatter:cublas tp_gemm_reducescatter:triton --runs 2
    python3 benchmarks/gpu/clock_case.py --summarize clock.json     (where each block's time went)
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from agents.strategist.codegen import render
from kloom.suite import find
from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.evaluator import interleaved


class _NoSampler:
    def __init__(self, *args, **kwargs):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    open = True

    def begin_window(self) -> None:
        pass

    def sample(self) -> None:
        pass

    def summary(self) -> dict:
        return {"status": "unavailable", "reason": "switched off by clock_case.py --no-nvml"}


def _row(block) -> list:
    """wall, reported, then per rank the side's own loop / draw / call / project totals (ms)."""
    ranks = [[round(p.get(k, 0.0), 2) for k in ("loop", "draw", "call", "project")] for _, p in sorted((block.phases or {}).items()) if p]
    return [round(block.wall_ms, 2), round(block.reported_ms, 2), ranks]


def summarize(path: str) -> None:
    """Per evaluation and side: each block's time outside the side's own loop, its draw / call /
    projection totals (slowest rank) and its unaccounted time (judge's wall less reported)."""
    for row in json.loads(Path(path).read_text()):
        print(f"{row['case']} run {row['run']}: {row['status']} {row['error'][:160]} {row.get('summary', '')[:120]}")
        for side, blocks in (row["blocks"] or {}).items():
            ranks = [b[2] if len(b) > 2 else None for b in blocks]
            if all(ranks):
                outside = [b[0] - max(r[0] for r in b[2]) for b in blocks]
                draw, call, project = ([max(r[i] for r in b[2]) for b in blocks] for i in (1, 2, 3))
                print(f"  {side:9s} outside loop {_fmt(outside)}  draw {_fmt(draw)}  call {_fmt(call)}  project max {max(project):.1f}")
            print(f"  {side:9s} unaccounted {_fmt([b[0] - b[1] for b in blocks])}")


def _fmt(values) -> str:
    return "[" + " ".join(f"{v:.1f}" for v in values) + "]"


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--summarize":
        summarize(sys.argv[2])
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+", help="workload:way")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", default=None)
    parser.add_argument("--no-nvml", action="store_true", help="time without the judge's NVML sampler (is it the noise?)")
    args = parser.parse_args()
    if args.no_nvml:
        from services.worker.evaluator import judge

        judge.NvmlSampler = _NoSampler
    seen: list[dict] = []
    original = interleaved.Timing._check

    def spying(self, blocks, per_block):
        seen.append({side: [_row(b) for b in bl] for side, bl in blocks.items()})
        return original(self, blocks, per_block)

    interleaved.Timing._check = spying
    rows = []
    with Evaluator("cuda", EvalSettings.for_device("cuda", min_iters=5, max_iters=20)) as ev, tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            name, way = case.split(":")
            path = Path(find(name).path)
            code = render(path.read_text(), {"wrapper": "none", "rewrites": ["overlap"]}, mutated_inputs=[], label="overlap_kernels")
            code = code.replace("_KL_OVERLAP_STRICT = False", "_KL_OVERLAP_STRICT = True", 1).replace("_KL_OVERLAP_FORCE = None", f"_KL_OVERLAP_FORCE = {way!r}", 1)
            candidate = Path(tmp) / f"{name}_{way}.py"
            candidate.write_text(code)
            for run in range(args.runs):
                seen.clear()
                result = ev.evaluate(path, candidate, world_size=2)
                row = {"case": case, "run": run, "status": result.status, "error": result.error.message if result.error else "",
                       "summary": result.summary(), "blocks": seen[-1] if seen else None}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out:  # after every evaluation: a run cut short keeps what it measured
                    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
