"""One trial the ParallelKernelBench way: a fresh process per rank, started torchrun-style, that
imports torch, joins a new process group, builds the reference and the candidate, runs both on
seeded inputs, compares, optionally times, and exits. ``eval_pool.py`` launches it to compare
with a warm pool; it is not part of kloom's evaluator."""

from __future__ import annotations

import os
import sys
import time


def main() -> None:
    workload, candidate, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    import torch
    import torch.distributed as dist

    from kloom.workload import import_file

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    wl = import_file(workload, "fresh_workload")
    cand = import_file(candidate, "fresh_candidate")
    torch.manual_seed(1234 + rank)
    ref = wl.Model(*wl.get_init_inputs())
    torch.manual_seed(1234 + rank)
    new = cand.ModelNew(*wl.get_init_inputs())
    torch.manual_seed(99 + rank)
    inputs = wl.get_inputs()
    with torch.no_grad():
        want = ref(*[x.clone() for x in inputs])
        got = new(*[x.clone() for x in inputs])
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    if mode == "time":
        with torch.no_grad():
            for fn in (ref, new):
                samples = []
                for _ in range(20):
                    dist.barrier()
                    t0 = time.perf_counter()
                    fn(*inputs)
                    samples.append(time.perf_counter() - t0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
