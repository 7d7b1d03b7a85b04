"""Run-time support of imported workloads: loading a file of the user's checkout, checking that it
is still the file that was imported, and building ParallelKernelBench inputs on every rank.

Imported workload files call this inside evaluator rank processes, so it imports torch and the
standard library only.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from pathlib import Path
from types import ModuleType

import torch
import torch.distributed as dist

from kloom.workload import import_file

#: Trial numbers drawn for ParallelKernelBench's ``create_input_tensor`` lie in [0, 2**20).
_TRIALS = 1 << 20


class StaleImport(RuntimeError):
    """The checkout's file changed after ``kloom suite import``: the workload would no longer be
    the one that was imported (and recorded), so it refuses to run."""


def load_file(path: str | Path, module_name: str, sha256: str | None = None) -> ModuleType:
    """Import ``path`` as a fresh module named ``module_name``, after checking its SHA-256."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} is gone from the checkout; re-run kloom suite import")
    if sha256 is not None:
        actual = hashlib.sha256(path.read_bytes()).hexdigest()
        if actual != sha256:
            raise StaleImport(f"{path} changed since it was imported (sha256 {actual[:12]}, imported {sha256[:12]}); re-run kloom suite import")
    return import_file(path, module_name)


def pkb_input_builder(checkout: str, sha256: str):
    """ParallelKernelBench's ``create_input_tensor`` from ``checkout/utils/input_output_tensors.py``.

    The checkout's root goes first on ``sys.path``, as PKB's own worker puts it, so that the
    references' and the builder's ``utils.*`` imports resolve to the checkout.
    """
    root = str(Path(checkout))
    if root not in sys.path:
        sys.path.insert(0, root)
    module = load_file(Path(root) / "utils" / "input_output_tensors.py", f"_kloom_pkb_inputs_{sha256[:16]}", sha256)
    return module.create_input_tensor


def pkb_call_options(create_input_tensor) -> dict:
    """Keyword arguments for ``create_input_tensor`` beyond (rank, world_size, problem_id,
    base_shape, dtype): the rank's device, and a ``trial`` number so that every kloom trial gets
    fresh inputs. PKB seeds its generator from (problem, rank, trial) and some problems draw data
    shared by all ranks from the seed of rank 0, so every rank must use the same trial: rank 0
    draws it from the generator kloom seeded, and broadcasts it."""
    params = inspect.signature(create_input_tensor).parameters
    device = torch.empty(0).device  # the evaluator makes the rank's device the default device
    options: dict = {}
    if "trial" in params:
        options["trial"] = shared_trial(device)
    if "device" in params:
        options["device"] = device
    return options


def shared_trial(device: torch.device) -> int:
    """A number drawn from rank 0's seeded generator, the same on every rank."""
    trial = torch.randint(0, _TRIALS, (1,), device=device)
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.broadcast(trial, src=0)
    return int(trial.item())
