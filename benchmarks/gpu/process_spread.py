"""How much the same launch-bound model's time differs from one fresh process to the next, with
each process left to the scheduler and with each pinned to the same CPUs: the spread that a
judge comparing a long-lived reference process with fresh candidate processes inherits.

    python3 benchmarks/gpu/process_spread.py MODEL.py [--processes 6] [--placements scheduler,cpus=0-7]

Each process builds the model (KernelBench format: Model, get_inputs, get_init_inputs) on the
GPU, warms up, and times 300 calls (CUDA events around call and synchronize, as the judge's
ranks do), printing the median; the summary gives the spread of the medians per placement.
Placements: ``scheduler`` (as started), ``cpus=LIST`` (taskset's CPU list), ``hashseed`` (the
scheduler's placement with PYTHONHASHSEED=0). They take turns process by process, in turned
order every other time, so a drift of the machine falls on all of them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys


def one_process(path: str) -> float:
    import torch  # lazy: the parent only starts processes

    spec = importlib.util.spec_from_file_location("workload", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = module.Model(*module.get_init_inputs())
        inputs = module.get_inputs()
    model = model.cuda()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in inputs]
    times = []
    with torch.no_grad():
        for i in range(330):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            model(*inputs)
            torch.cuda.synchronize()
            end.record()
            end.synchronize()
            if i >= 30:
                times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--placements", default="scheduler,cpus=0-7")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"median_ms": one_process(args.model)}))
        return
    placements = [p.strip() for p in args.placements.split(",") if p.strip()]
    medians: dict[str, list[float]] = {p: [] for p in placements}
    for i in range(args.processes):
        for placement in (placements if i % 2 == 0 else list(reversed(placements))):
            argv = [sys.executable, __file__, args.model, "--child"]
            env = dict(os.environ)
            if placement.startswith("cpus="):
                argv = ["taskset", "-c", placement.split("=", 1)[1]] + argv
            elif placement == "hashseed":
                env["PYTHONHASHSEED"] = "0"
            elif placement != "scheduler":
                parser.error(f"unknown placement {placement!r}")
            out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
            medians[placement].append(json.loads(out.stdout.strip().splitlines()[-1])["median_ms"])
            print(f"{os.path.basename(args.model)} process {i + 1} {placement:<9} {medians[placement][-1]:.4f} ms", flush=True)
    for placement, values in medians.items():
        low, high = min(values), max(values)
        print(f"{os.path.basename(args.model)} {placement:<9} median {statistics.median(values):.4f} ms, "
              f"max/min {high / low:.3f}, medians {', '.join(f'{v:.4f}' for v in values)}")


if __name__ == "__main__":
    main()
