"""The evaluator's device memory and time on a problem of GiB tensors, against the bound the
third-party issue sets (the reference's own peak + the candidate's own peak + one copy of the
outputs), for one or more trees side by side in one run (the working tree, and a tree before a
change: ``--tree before=.before``).

    python3 benchmarks/gpu/evaluator_memory.py --gib 2 --tree now=. --tree before=.before --out $OUT/memory.json

The problem is KernelBench-like (level 1, an elementwise product: one input of ``--gib`` GiB and
an output of the same size, no parameters); the candidate computes the same in another way. For
each tree, in a process of its own (trees alternate for ``--rounds``): one evaluation with a warm
pool, the device's used memory sampled every 20 ms by NVML (every process on the GPU: both pools'
ranks), the ranks' own allocator peaks, and the evaluation's phase times. The own peaks come from
one more process that runs the reference alone (the candidate's is the same computation).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

GIB = float(1 << 30)

WORKLOAD = '''
import torch
import torch.nn as nn

WORLD_SIZES = [1]
ROWS = {rows}


class Model(nn.Module):
    def forward(self, x):
        return x * 3.0


def get_init_inputs():
    return []


def get_inputs():
    return [torch.randn(ROWS, 4096)]
'''

CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.mul(x, 3.0)
'''

OWN = r'''
import json, sys, torch, pynvml
sys.path.insert(0, sys.argv[1])
from kloom.workload import import_file
pynvml.nvmlInit()
used = lambda: pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used
before = used()
torch.cuda.init(); torch.ones(1, device="cuda"); torch.cuda.synchronize()
context = used() - before
m = import_file(sys.argv[2], "own_peak")
x = [t.cuda() for t in m.get_inputs()]
torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    y = m.Model()(*x)
torch.cuda.synchronize()
print("RESULT" + json.dumps({"own_peak": torch.cuda.max_memory_allocated(), "output_bytes": y.numel() * y.element_size(), "context": context}))
'''

CHILD = r'''
import json, sys, threading, time
root, workload, candidate = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, root)
import pynvml
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
used = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used
from services.worker.evaluator import EvalSettings, Evaluator
out = {"runs": []}
with Evaluator("cuda", EvalSettings.for_device("cuda")) as ev:
    for i in range(2):  # the first starts the pools; the second is a warm pool's evaluation
        idle = used()
        peak = [idle]
        stop = threading.Event()
        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], used())
                stop.wait(0.02)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        t0 = time.monotonic()
        r = ev.evaluate(workload, candidate, world_size=1)
        wall = time.monotonic() - t0
        stop.set(); t.join()
        mem = r.memory
        out["runs"].append({"status": r.status, "speedup": r.speedup, "wall_s": wall,
                            "phase_seconds": {k: round(v, 2) for k, v in r.phase_seconds.items()},
                            "device_peak_above_idle": peak[0] - idle, "device_idle": idle,
                            "reference_allocator_peak": mem.reference_peak_bytes if mem else None,
                            "candidate_allocator_peak": mem.candidate_peak_bytes if mem else None,
                            "peaks_by_command": getattr(mem, "peaks_by_command", None) if mem else None,
                            "error": (r.error.message[:500] if r.error else None)})
print("RESULT" + json.dumps(out))
'''


def child(code: str, root: Path, *args: str, timeout: int = 900) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    done = subprocess.run([sys.executable, "-c", code, str(root), *args], env=env, cwd=root, capture_output=True, text=True, timeout=timeout)
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT")]
    if done.returncode != 0 or not line:
        raise RuntimeError(f"{root}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(line[0][len("RESULT"):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gib", type=float, default=2.0, help="size of the input (and of the output), GiB")
    p.add_argument("--tree", action="append", default=[], help="NAME=PATH of a tree to measure (default: now=.)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="")
    args = p.parse_args()
    trees = [t.split("=", 1) for t in (args.tree or ["now=."])]
    rows = int(args.gib * GIB / 4 / 4096)
    with tempfile.TemporaryDirectory() as tmp:
        workload, candidate = Path(tmp) / "scale_gib.py", Path(tmp) / "scale_gib_new.py"
        workload.write_text(WORKLOAD.format(rows=rows))
        candidate.write_text(CANDIDATE)
        own = child(OWN, Path(trees[0][1]).resolve(), str(workload))
        bound = 2 * own["own_peak"] + own["output_bytes"]
        report = {"gib": args.gib, "own": own, "bound_bytes": bound, "trees": {name: [] for name, _ in trees}}
        for _ in range(args.rounds):
            for name, path in trees:
                report["trees"][name].append(child(CHILD, Path(path).resolve(), str(workload), str(candidate)))
    print(f"input {args.gib} GiB; reference's own peak {own['own_peak'] / GIB:.2f} GiB; bound (ref + cand + outputs) {bound / GIB:.2f} GiB; "
          f"one process's CUDA context {own['context'] / GIB:.2f} GiB (a warm run's peak holds the fresh candidate ranks' context)")
    print("| tree | run | status | device peak above idle, GiB | / bound | ref alloc peak | cand alloc peak | wall s | phases |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, results in report["trees"].items():
        for result in results:
            for i, r in enumerate(result["runs"]):
                print(f"| {name} | {'cold' if i == 0 else 'warm'} | {r['status']} | {r['device_peak_above_idle'] / GIB:.2f} | "
                      f"{r['device_peak_above_idle'] / bound:.2f} | {(r['reference_allocator_peak'] or 0) / GIB:.2f} | "
                      f"{(r['candidate_allocator_peak'] or 0) / GIB:.2f} | {r['wall_s']:.1f} | {r['phase_seconds']} |")
    for name, results in report["trees"].items():
        for r in results[-1]["runs"][-1:]:
            if r.get("peaks_by_command"):
                print(f"{name}, warm, peaks by command (GiB):", {k: round(v / GIB, 2) for k, v in r["peaks_by_command"].items()})
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
