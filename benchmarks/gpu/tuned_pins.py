"""What the knowledge base's autotuning choices save a kernel candidate (``kloom.tuning``), measured
through the evaluator as a job runs it, side by side in one run on one GPU: for each workload the
strategist's kernel candidate is judged three times, each in an evaluator of its own with empty
compiler caches (as on a fresh machine, or for another user): autotuned, then pinned to the
choices the first run reported, then autotuned again (the spread between the two autotuned runs is
the noise). Per run: the seconds of loading and the first correctness trials (where Triton
compiles and autotunes), the evaluation's total, the speedup over the reference, and the
compile-time estimate the planner used (``compile_cost.py``).

    python3 benchmarks/gpu/tuned_pins.py --out $OUT/tuned_pins.json WORKLOAD.py [...] [--shapes gpu] [--no-again]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agents.analysis import build_analysis  # noqa: E402
from agents.strategist.triton_kernels.compile_cost import compile_cost  # noqa: E402
from agents.strategist.triton_kernels.emit import tuned_block  # noqa: E402
from agents.strategist.triton_kernels.option import PLAIN, kernel_candidate_for, kernel_offers  # noqa: E402
from agents.strategist.triton_kernels.plan import find_matches  # noqa: E402
from kloom.tuning import parse_tuned  # noqa: E402
from kloom.workload_parts import candidate_base  # noqa: E402
from services.worker.evaluator import EvalSettings, Evaluator  # noqa: E402


def _evaluator(device: str, shapes: str, cache: str) -> Evaluator:
    os.environ["KLOOM_CACHE_DIR"] = cache  # read when the pools start: caches of this run alone
    return Evaluator(device, EvalSettings.for_device(device, shapes=shapes))


def _run(device: str, shapes: str, workload: Path, code: str, label: str, root: Path) -> dict:
    cache = tempfile.mkdtemp(prefix=f"cache_{label}_", dir=root)
    candidate = root / f"{workload.stem}_{label}.py"
    candidate.write_text(code)
    started = time.monotonic()
    with _evaluator(device, shapes, cache) as ev:
        result = ev.evaluate(workload, candidate, world_size=1)
    phases = result.phase_seconds
    return {
        "label": label, "status": result.status, "error": (result.error.message[:300] if result.error else ""),
        "load_and_first_trials_s": round(phases.get("load", 0.0) + phases.get("correctness", 0.0), 2),
        "phase_seconds": {k: round(v, 2) for k, v in phases.items()},
        "wall_s": round(time.monotonic() - started, 1),
        "speedup": result.timing.speedup if result.timing else None,
        "candidate_ms": result.timing.candidate_ms if result.timing else None,
        "tuned": len(result.tuned), "tuned_records": [t.to_dict() for t in result.tuned],
    }


def workload_row(device: str, shapes: str, workload: Path, root: Path, again: bool = True) -> dict:
    with _evaluator(device, shapes, tempfile.mkdtemp(prefix="cache_trace_", dir=root)) as ev:
        traces = ev.analyze(workload, world_size=1)
    analysis = build_analysis(traces, family="single_gpu", world_size=1, device=device, baseline=None)
    offers = [o for o in kernel_offers(analysis) if o.params.get("wrapper") == PLAIN]
    row: dict = {"workload": str(workload)}
    if not offers:
        row["skipped"] = "no kernel candidate for this structure"
        return row
    source = candidate_base(workload.read_text())
    code = kernel_candidate_for(source, analysis, offers[0].params, "tuned_pins")
    plan = find_matches(analysis.op_graph, offers[0].params.get("templates"))
    cost = compile_cost(analysis.op_graph, plan.matches)
    row.update(regions=cost.regions, distinct=cost.kernels, estimate_s=round(cost.seconds, 1))
    first = _run(device, shapes, workload, code, "autotuned", root)
    pins = parse_tuned(first.pop("tuned_records"))  # the records as the knowledge base hands them back
    pinned = _run(device, shapes, workload, code + tuned_block(code, pins), "pinned", root)
    row["runs"] = [first, pinned] + ([_run(device, shapes, workload, code, "autotuned_again", root)] if again else [])
    for r in row["runs"][1:]:
        r.pop("tuned_records")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("workloads", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default="gpu")
    parser.add_argument("--no-again", action="store_true", help="skip the second autotuned run (the noise) where compiling takes minutes")
    args = parser.parse_args()
    rows = json.loads(args.out.read_text()) if args.out.is_file() else []
    done = {r["workload"] for r in rows}
    root = Path(tempfile.mkdtemp(prefix="kloom_tuned_pins_"))
    for workload in args.workloads:
        if str(workload) in done:
            continue
        try:
            row = workload_row(args.device, args.shapes, workload, root, again=not args.no_again)
        except Exception as exc:  # noqa: BLE001 - one workload's failure is its row, the others still run
            row = {"workload": str(workload), "error": f"{type(exc).__name__}: {exc}"[:500]}
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1))
        for run in row.get("runs", []):
            print(f"{workload.stem:28s} {run['label']:16s} {run['status']:10s} load+trials {run['load_and_first_trials_s']:7.1f} s  "
                  f"total {run['phase_seconds'].get('total', 0):7.1f} s  speedup {run['speedup'] or 0:.3f}  tuned {run['tuned']}", flush=True)
        if "runs" not in row:
            print(f"{workload.stem:28s} {row.get('skipped') or row.get('error')}", flush=True)
        else:
            print(f"{workload.stem:28s} estimate {row['estimate_s']} s ({row['regions']} regions, {row['distinct']} distinct)", flush=True)


if __name__ == "__main__":
    main()
