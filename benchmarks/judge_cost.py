"""What the judge costs per candidate: the judge of version 2 (reference and candidate in separate
pools, trials in lockstep, stopped sides, the clock cross-check) against the landed one (git
``LANDED``, the candidate in the reference's process), side by side in one run.

    .venv/bin/python benchmarks/judge_cost.py --device cpu --world-sizes 1 2 --candidates 6 --rounds 2

Each variant runs in a process of its own (the landed one from a ``git archive`` of its tree in a
temporary directory), with a warm pool: one evaluation to start it, then ``--candidates`` honest
candidates whose evaluation times (``EvalResult.phase_seconds["total"]``) are kept. Variants
alternate for ``--rounds`` rounds, so a slow spell of the machine weighs on both. Prints a
Markdown table: medians per variant and world size, and the ratio new / landed (goal <= 1.3x).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LANDED = "e6eea0b"  # the last landed commit whose judge is version 1 (the candidate in the reference's process)
WORKLOAD = "tests/evaluator/workloads/linear_allreduce.py"
CANDIDATE = "tests/evaluator/candidates/correct.py"

CHILD = r'''
import inspect, json, sys, time
root, device, world, n, workload, candidate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
sys.path.insert(0, root)
from services.worker.evaluator import EvalSettings, Evaluator
settings = EvalSettings.for_device(device)
out = {"totals": [], "statuses": [], "speedups": [], "starts": [], "errors": [], "phases": []}
with Evaluator(device, settings) as ev:
    # As a job tells it (where the judge takes it): how many candidates follow each one.
    told = "more_after" in inspect.signature(ev.evaluate).parameters
    ahead = lambda left: {"more_after": left} if told else {}
    t0 = time.monotonic()
    first = ev.evaluate(workload, candidate, world_size=world, **ahead(n))
    out["first_s"] = time.monotonic() - t0
    for i in range(n):
        r = ev.evaluate(workload, candidate, world_size=world, **ahead(n - 1 - i))
        out["totals"].append(r.phase_seconds["total"])
        out["statuses"].append(r.status)
        out["speedups"].append(r.speedup)
        out["starts"].append(r.phase_seconds.get("start_candidate", 0.0))
        out["phases"].append(dict(r.phase_seconds))
        if r.status != "correct":
            out["errors"].append(r.status + ": " + (r.error.message if r.error else r.summary())[:400])
print("RESULT" + json.dumps(out))
'''


def landed_tree(directory: Path, given: str | None = None) -> Path:
    """The landed judge's tree (services and kloom at ``LANDED``): ``given`` (a copy made where
    git is, for a machine without the repository's history: ``git archive e6eea0b services kloom
    tests/evaluator | tar -x -C .landed``), or one extracted under ``directory``."""
    if given:
        return Path(given).resolve()
    archive = directory / "landed.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), LANDED, "services", "kloom", "tests/evaluator"], check=True)
    tree = directory / "landed"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def run(root: Path, device: str, world: int, n: int, workload: Path, candidate: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, "-c", CHILD, str(root), device, str(world), str(n), str(workload), str(candidate)], env=env, cwd=root,
                          capture_output=True, text=True, timeout=1800)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    if done.returncode != 0 or not line:
        raise RuntimeError(f"{root}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(line[0][len("RESULT"):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--world-sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--landed", default=None, help="a directory holding the landed tree (default: git archive of LANDED)")
    parser.add_argument("--workload", default=WORKLOAD, help="the workload both judges time (this tree's file)")
    parser.add_argument("--candidate", default=CANDIDATE, help="an honest candidate for it (this tree's file)")
    args = parser.parse_args()
    # Both judges read the same files (this tree's), so they time the same thing.
    workload, candidate = (ROOT / args.workload).resolve(), (ROOT / args.candidate).resolve()
    with tempfile.TemporaryDirectory(prefix="kloom-judge-cost-") as tmp:
        variants = {f"landed ({LANDED})": landed_tree(Path(tmp), args.landed), "judge v2": ROOT}
        samples: dict[tuple[str, int], list[float]] = {}
        firsts: dict[tuple[str, int], list[float]] = {}
        statuses: dict[tuple[str, int], set] = {}
        starts: dict[tuple[str, int], list[float]] = {}
        phases: dict[tuple[str, int], list[dict]] = {}
        errors: list[str] = []
        for world in args.world_sizes:
            for r in range(args.rounds):
                order = list(variants.items()) if r % 2 == 0 else list(variants.items())[::-1]
                for name, root in order:
                    got = run(root, args.device, world, args.candidates, workload, candidate)
                    samples.setdefault((name, world), []).extend(got["totals"])
                    firsts.setdefault((name, world), []).append(got["first_s"])
                    statuses.setdefault((name, world), set()).update(got["statuses"])
                    starts.setdefault((name, world), []).extend(got.get("starts", []))
                    phases.setdefault((name, world), []).extend(got.get("phases", []))
                    errors.extend(f"{name}, world size {world}: {e}" for e in got.get("errors", []))
    print(f"Judge cost per candidate on {args.device} ({args.candidates} warm candidates x {args.rounds} rounds per variant, "
          f"{args.workload} with {args.candidate}, EvalSettings.for_device defaults)\n")
    print("| world size | variant | median s/candidate | p10-p90 s | of which waiting for the candidate's ranks (median s) "
          "| first evaluation s (pool start) | statuses |")
    print("|---|---|---|---|---|---|---|")
    ratios = {}
    for world in args.world_sizes:
        for name in variants:
            xs = sorted(samples[(name, world)])
            p10, p90 = xs[int(0.1 * (len(xs) - 1))], xs[int(0.9 * (len(xs) - 1))]
            waited = starts.get((name, world)) or []
            print(f"| {world} | {name} | {statistics.median(xs):.3f} | {p10:.3f}-{p90:.3f} | "
                  f"{statistics.median(waited) if waited else float('nan'):.3f} | "
                  f"{statistics.median(firsts[(name, world)]):.2f} | {', '.join(sorted(statuses[(name, world)]))} |")
        old, new = (statistics.median(samples[(n, world)]) for n in variants)
        ratios[world] = new / old
    print("\nMedian seconds per phase of an evaluation (`EvalResult.phase_seconds`; the variants name their phases differently)\n")
    for (name, world), rows in phases.items():
        names = sorted({k for row in rows for k in row if k != "total"})
        cells = ", ".join(f"{k} {statistics.median(row.get(k, 0.0) for row in rows):.3f}" for k in names)
        print(f"- world size {world}, {name}: {cells}")
    print()
    for world, ratio in ratios.items():
        print(f"world size {world}: judge v2 / landed = {ratio:.2f}x (goal <= 1.3x)")
    if errors:
        print("\nCandidates not judged correct (an honest candidate should be):")
        for e in errors:
            print(f"- {e}")


if __name__ == "__main__":
    main()
