"""What one timed call's fresh inputs and projection cost a rank, piece by piece (the judge draws
every call's inputs afresh and projects every call's outputs, outside the timed span but inside
the evaluation's time: benchmarks/gpu/judge_blocks.py shows their totals).

    python3 benchmarks/gpu/draw_cost.py [--workload W] [--device cuda] [--calls 500]
"""
from __future__ import annotations

import argparse
import time

import torch

from services.worker.evaluator import tensors as T
from services.worker.evaluator.groups import reused_groups
from services.worker.evaluator.projection import Projector
from services.worker.evaluator.rank import seed_everything
from kloom.workload import import_file


def _us(fn, calls: int, sync: bool) -> float:
    fn()
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    if sync:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="tests/evaluator/workloads/linear_allreduce.py")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    workload = import_file(args.workload, "draw_cost_workload")
    sync = device.type == "cuda"
    n = args.calls

    def inputs():
        with torch.device(device), reused_groups():
            return list(T.to_device(list(workload.get_inputs()), device))

    def draw():
        seed_everything(1234)
        return inputs()

    x = draw()
    projector = Projector(7, device)
    rows = {
        "seed_everything": _us(lambda: seed_everything(1234), n, sync),
        "torch.manual_seed": _us(lambda: torch.manual_seed(1234), n, sync),
        "get_inputs under torch.device": _us(inputs, n, sync),
        "get_inputs plain": _us(lambda: workload.get_inputs(), n, sync),
        "draw (seed + get_inputs + to_device)": _us(draw, n, sync),
        "projector.add (one call's outputs)": _us(lambda: projector.add(x), n, sync),
    }
    for name, us in rows.items():
        print(f"{name:42s} {us:8.1f} us")


if __name__ == "__main__":
    main()
