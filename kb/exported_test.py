"""Checks ModelNew (kernel.py) against the reference Model (workload.py) on every world size the
workload supports up to the kernel's own, with gloo on the CPU or NCCL on GPUs (one per rank).

Written next to an exported kernel by kloom's knowledge base (``kloom kb export``) and run with
plain pytest; it needs torch and pytest only. Run it with ``pytest -q`` in this directory.
Settings: ``KERNEL_TEST_DEVICE`` (cpu or cuda; default: where the kernel was found),
``KERNEL_TEST_MAX_WORLD_SIZE`` (default: the kernel's world size) and ``KLOOM_SHAPES`` (the
workload's shape profile; default ``ci`` on the CPU, ``gpu`` on GPUs).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import random
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
META = json.loads((HERE / "kernel.json").read_text())
TRIALS = 3
TIMEOUT_S = 600
INIT_SEED = 1234

#: (atol, rtol) by dtype, as the evaluator that accepted the kernel judged it; the workload's
#: TOLERANCE overrides them.
DEFAULT_TOLERANCE = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1.6e-2),
}


def _device() -> str:
    return os.environ.get("KERNEL_TEST_DEVICE") or META["device"]


def _world_sizes() -> list[int]:
    """The workload's WORLD_SIZES (read without running it), up to the kernel's world size."""
    tree = ast.parse((HERE / "workload.py").read_text())
    supported = [1]
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "WORLD_SIZES" for t in node.targets):
            value = ast.literal_eval(node.value)
            supported = [value] if isinstance(value, int) else list(value)
    limit = int(os.environ.get("KERNEL_TEST_MAX_WORLD_SIZE", META["world_size"]))
    return sorted(w for w in set(supported) if w <= limit) or [min(supported)]


def _load(filename: str, name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / filename)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _seed(seed: int, rank: int) -> None:
    value = (seed * 1_000_003 + rank * 7_919 + 17) % (2**31 - 1)
    torch.manual_seed(value)
    random.seed(value)


def _build(cls, workload, rank: int, device: torch.device):
    """Model and ModelNew are built under the same seed, so parameters made in the same order match."""
    _seed(INIT_SEED, rank)
    with torch.device(device):
        model = cls(*workload.get_init_inputs())
    return model.to(device) if isinstance(model, torch.nn.Module) else model


def _inputs(workload, seed: int, rank: int, device: torch.device) -> list:
    _seed(seed, rank)
    with torch.device(device):
        inputs = list(workload.get_inputs())
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _clone(values: list) -> list:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in values]


def _tolerances(workload) -> dict:
    table = dict(DEFAULT_TOLERANCE)
    for key, value in dict(getattr(workload, "TOLERANCE", None) or {}).items():
        dtype = key if isinstance(key, torch.dtype) else getattr(torch, str(key).replace("torch.", ""))
        if isinstance(value, dict):
            value = (value.get("atol", table.get(dtype, (0, 0))[0]), value.get("rtol", table.get(dtype, (0, 0))[1]))
        table[dtype] = (float(value[0]), float(value[1]))
    return table


def _compare(got, want, tolerance: dict, label: str) -> None:
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{label}: expected {len(want)} values, got {got!r:.200}"
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(g, w, tolerance, f"{label}[{i}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{label}: keys differ"
        for key in want:
            _compare(got[key], want[key], tolerance, f"{label}[{key!r}]")
    elif isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{label}: expected a tensor, got {type(got).__name__}"
        exact = not (want.is_floating_point() or want.is_complex())
        atol, rtol = (0.0, 0.0) if exact else tolerance.get(want.dtype, (1e-5, 1.3e-6))
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol, msg=lambda m: f"{label}: {m}")
    elif isinstance(want, float):
        assert got == pytest.approx(want, rel=1e-6), f"{label}: {got!r} != {want!r}"
    else:
        assert got == want, f"{label}: {got!r} != {want!r}"


def _rank(rank: int, world_size: int, device_kind: str, init_file: str) -> None:
    if device_kind == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    backend = "nccl" if device_kind == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    try:
        workload = _load("workload.py", "exported_workload")
        kernel = _load("kernel.py", "exported_kernel")
        tolerance = _tolerances(workload)
        reference = _build(workload.Model, workload, rank, device)
        candidate = _build(kernel.ModelNew, workload, rank, device)
        for trial in range(TRIALS):
            inputs = _inputs(workload, 1000 + trial, rank, device)
            ref_inputs, new_inputs = _clone(inputs), _clone(inputs)
            with torch.no_grad():
                want = reference(*ref_inputs)
                got = candidate(*new_inputs)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            _compare(got, want, tolerance, f"rank {rank}, trial {trial}: output")
            _compare(new_inputs, ref_inputs, tolerance, f"rank {rank}, trial {trial}: inputs after forward")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world_size", _world_sizes())
def test_kernel_matches_reference(world_size: int, tmp_path: Path) -> None:
    device = _device()
    if device == "cuda" and torch.cuda.device_count() < world_size:
        pytest.skip(f"needs {world_size} GPUs, this machine has {torch.cuda.device_count()}")
    os.environ.setdefault("KLOOM_SHAPES", "gpu" if device == "cuda" else "ci")
    context = mp.start_processes(
        _rank, args=(world_size, device, str(tmp_path / "rendezvous")), nprocs=world_size, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + TIMEOUT_S
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail(f"ranks did not finish within {TIMEOUT_S} s (a collective that never matched?)")
