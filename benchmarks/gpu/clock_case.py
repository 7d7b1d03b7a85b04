"""Why the judge's clock cross-check rejects an overlap path (tests/agents/test_overlap.py on
2xH200: ``tp_gemm_reducescatter`` forced to ``cublas`` left ~8 ms a call unaccounted). Evaluates
suite workloads with one overlap way forced, ``--runs`` times each, and prints every timing
round's block: the judge's wall time and the side's own reported time, reference beside candidate.

    python3 benchmarks/gpu/clock_case.py tp_gemm_reducescatter:cublas tp_gemm_reducescatter:triton --runs 2
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from agents.strategist.codegen import render
from kloom.suite import find
from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.evaluator import interleaved


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+", help="workload:way")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    seen: list[dict] = []
    original = interleaved.Timing._check

    def spying(self, blocks, per_block):
        seen.append({side: [(round(b.wall_ms, 3), round(b.reported_ms, 3)) for b in bl] for side, bl in blocks.items()})
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
                       "blocks": seen[-1] if seen else None}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
