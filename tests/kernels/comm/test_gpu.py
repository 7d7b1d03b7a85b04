"""The comm kernels on real GPUs: every tuned configuration of every kernel, on torch symmetric
memory over 2 (and, where there are, 4) GPUs, against torch + NCCL and torch's own fused
symmetric-memory ops, over several calls with fresh random inputs on every rank, and with one
rank arriving late (``gpu_ranks.py`` holds what each rank runs)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("world", [2, 4])
def test_every_kernel_matches_torch_and_nccl_on_every_rank(tmp_path, world):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} CUDA GPUs (the kernels reach peers' memory); this machine has {torch.cuda.device_count()}")
    import torch.multiprocessing as mp

    import gpu_ranks

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=gpu_ranks.rank_main, args=(r, world, str(tmp_path / "store"), results)) for r in range(world)]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=900) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    failures = [f for _, fs in sorted(got) for f in fs]
    assert not failures, "\n".join(failures)
