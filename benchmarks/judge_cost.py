"""What the judge costs per candidate: the judge of version 2 (reference and candidate in separate
pools, trials in lockstep, stopped sides, the clock cross-check) against the landed one (git
``LANDED``, the candidate in the reference's process), side by side in one run.

    .venv/bin/python benchmarks/judge_cost.py --device cpu --world-sizes 1 2 --candidates 6 --rounds 2 [--also unforked late]

Each variant runs in a process of its own (the landed one from a ``git archive`` of its tree in a
temporary directory), with a warm pool: one evaluation to start it, then ``--candidates`` honest
candidates whose evaluation times (``EvalResult.phase_seconds["total"]``) are kept. Variants
alternate for ``--rounds`` rounds, so a slow spell of the machine weighs on both. Prints a
Markdown table: medians per variant and world size, and the ratio new / landed (goal <= 1.3x).
``--also`` adds variants of judge v2 (``ALSO``); on a GPU the device memory each variant held is
sampled too.
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

#: Variants of judge v2 (``--also``): what they change, as ``EvalSettings`` overrides.
ALSO = {
    "unforked": ("ranks not forked", {"fork_ranks": False}),
    "late": ("spares admitted after the candidate", {"admit_spare_during_evaluation": False}),
    "sized": ("rounds sized to the work (timing_min_block_s=0.05)", {"timing_min_block_s": 0.05}),
    "allrounds": ("every timing round (timing_min_block_s=0)", {"timing_min_block_s": 0.0}),
    "unstaged": ("rounds not staged (staged_blocks=False)", {"staged_blocks": False}),
}

CHILD = r'''
import inspect, json, sys, time
root, device, world, n, workload, candidate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
overrides = json.loads(sys.argv[7])
sys.path.insert(0, root)
from services.worker.evaluator import EvalSettings, Evaluator
settings = EvalSettings.for_device(device, **overrides)
out = {"totals": [], "statuses": [], "speedups": [], "starts": [], "errors": [], "phases": []}


class DeviceMemory:
    """GPU 0's used memory above its idle level, and its compute processes, sampled every 5 ms
    by NVML (the warm candidates only): what the evaluator's processes hold, contexts included."""

    def __init__(self):
        import threading
        import pynvml
        pynvml.nvmlInit()
        self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.idle = self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used
        self.peak, self.processes, self.on = 0, 0, False
        self.done = threading.Event()
        threading.Thread(target=self.sample, daemon=True).start()

    def sample(self):
        while not self.done.wait(0.005):
            if self.on:
                self.peak = max(self.peak, self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used - self.idle)
                self.processes = max(self.processes, len(self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)))


memory = DeviceMemory() if device == "cuda" else None
with Evaluator(device, settings) as ev:
    # As a job tells it (where the judge takes it): how many candidates follow each one.
    told = "more_after" in inspect.signature(ev.evaluate).parameters
    ahead = lambda left: {"more_after": left} if told else {}
    t0 = time.monotonic()
    first = ev.evaluate(workload, candidate, world_size=world, **ahead(n))
    out["first_s"] = time.monotonic() - t0
    if memory is not None:
        memory.on = True
    for i in range(n):
        r = ev.evaluate(workload, candidate, world_size=world, **ahead(n - 1 - i))
        out["totals"].append(r.phase_seconds["total"])
        out["statuses"].append(r.status)
        out["speedups"].append(r.speedup)
        out["starts"].append(r.phase_seconds.get("start_candidate", 0.0))
        out["phases"].append(dict(r.phase_seconds))
        if r.status != "correct":
            out["errors"].append(r.status + ": " + (r.error.message if r.error else r.summary())[:400])
if memory is not None:
    memory.done.set()
    out["device_peak_gib"], out["device_processes"] = memory.peak / 2**30, memory.processes
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


def run(root: Path, overrides: dict, device: str, world: int, n: int, workload: Path, candidate: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(root)
    done = subprocess.run([sys.executable, "-c", CHILD, str(root), device, str(world), str(n), str(workload), str(candidate), json.dumps(overrides)],
                          env=env, cwd=root,
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
    parser.add_argument("--also", nargs="*", default=[], choices=sorted(ALSO),
                        help="more variants of judge v2: " + "; ".join(f"{k}: {v[0]}" for k, v in ALSO.items()))
    args = parser.parse_args()
    # Both judges read the same files (this tree's), so they time the same thing.
    workload, candidate = (ROOT / args.workload).resolve(), (ROOT / args.candidate).resolve()
    with tempfile.TemporaryDirectory(prefix="kloom-judge-cost-") as tmp:
        variants = {f"landed ({LANDED})": (landed_tree(Path(tmp), args.landed), {}), "judge v2": (ROOT, {})}
        for name in args.also:
            variants[f"judge v2, {ALSO[name][0]}"] = (ROOT, ALSO[name][1])
        samples: dict[tuple[str, int], list[float]] = {}
        by_round: dict[tuple[str, int], list[float]] = {}  # each round's median, for the ratio round by round
        firsts: dict[tuple[str, int], list[float]] = {}
        statuses: dict[tuple[str, int], set] = {}
        starts: dict[tuple[str, int], list[float]] = {}
        phases: dict[tuple[str, int], list[dict]] = {}
        device: dict[tuple[str, int], list[tuple[float, int]]] = {}
        errors: list[str] = []
        for world in args.world_sizes:
            for r in range(args.rounds):
                order = list(variants.items()) if r % 2 == 0 else list(variants.items())[::-1]
                for name, (root, overrides) in order:
                    got = run(root, overrides, args.device, world, args.candidates, workload, candidate)
                    samples.setdefault((name, world), []).extend(got["totals"])
                    by_round.setdefault((name, world), []).append(statistics.median(got["totals"]))
                    firsts.setdefault((name, world), []).append(got["first_s"])
                    statuses.setdefault((name, world), set()).update(got["statuses"])
                    starts.setdefault((name, world), []).extend(got.get("starts", []))
                    phases.setdefault((name, world), []).extend(got.get("phases", []))
                    if "device_peak_gib" in got:
                        device.setdefault((name, world), []).append((got["device_peak_gib"], got["device_processes"]))
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
        old = statistics.median(samples[(next(iter(variants)), world)])
        ratios[world] = {name: statistics.median(samples[(name, world)]) / old for name in list(variants)[1:]}
    print("\nMedian seconds per phase of an evaluation (`EvalResult.phase_seconds`; the variants name their phases differently)\n")
    for (name, world), rows in phases.items():
        names = sorted({k for row in rows for k in row if k != "total"})
        cells = ", ".join(f"{k} {statistics.median(row.get(k, 0.0) for row in rows):.3f}" for k in names)
        print(f"- world size {world}, {name}: {cells}")
    if device:
        print("\nGPU 0's memory above idle while the warm candidates were judged (NVML every 5 ms; the most of any round), "
              "and the most compute processes it had at once\n")
        for (name, world), rows in device.items():
            print(f"- world size {world}, {name}: {max(r[0] for r in rows):.2f} GiB, {max(r[1] for r in rows)} processes")
    print()
    for world, by_name in ratios.items():
        for name, ratio in by_name.items():
            # The machine's pace drifts between rounds (the landed judge's median moved by half on
            # the 2-core machine from one run to the next): each round's ratio, of the two variants
            # run back to back, says how far the overall one can be trusted.
            landed = by_round[(next(iter(variants)), world)]
            rounds = [new / old for new, old in zip(by_round[(name, world)], landed)]
            print(f"world size {world}: {name} / landed = {ratio:.2f}x (goal <= 1.3x); round by round "
                  f"{', '.join(f'{x:.2f}' for x in rounds)}, median {statistics.median(rounds):.2f}x")
    if errors:
        print("\nCandidates not judged correct (an honest candidate should be):")
        for e in errors:
            print(f"- {e}")


if __name__ == "__main__":
    main()
