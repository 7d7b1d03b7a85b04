"""Run-time integrity checks inside a rank process.

At start-up, before any candidate code is imported, the rank records the identity of every
public function of the modules a candidate could patch to fool the evaluator (timers, CUDA
events, collectives, tensor methods) and the process-wide numeric settings. After each step that
ran candidate code it compares them, and looks for child processes left running: any difference
is a reason to reject the candidate and rebuild the rank pool. (Python threads are kept out of
candidates by the static checker; torch's own compile threads would make a run-time thread
check cry wolf.)
"""

from __future__ import annotations

import inspect
import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn.functional as F

from kloom.processes import child_pids

_WATCHED_MODULES = {
    "time": time,
    "torch": torch,
    "torch.cuda": torch.cuda,
    "torch.distributed": dist,
    "torch.nn.functional": F,
    "torch.Tensor": torch.Tensor,
    "torch.nn.Module": torch.nn.Module,
    "torch.cuda.Event": torch.cuda.Event,
    "torch.cuda.Stream": torch.cuda.Stream,
    "torch.testing": torch.testing,
    "os": os,
}


#: Deprecated aliases whose mere inspection warns.
_SKIP = {"reduce_op"}


#: The settings a workload's ``PRECISION`` lets a candidate change (``precision.py``).
PRECISION_SETTINGS = ("float32_matmul_precision", "cudnn.allow_tf32", "cuda.matmul.allow_tf32",
                      "cuda.matmul.allow_fp16_reduced_precision_reduction", "cuda.matmul.allow_bf16_reduced_precision_reduction")


def numeric_settings() -> dict[str, object]:
    settings = {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "default_dtype": torch.get_default_dtype(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "grad_enabled": torch.is_grad_enabled(),
        # A candidate that changes its thread count changes its own speed only (the reference
        # runs in other processes), but the judge compares like with like.
        "num_threads": torch.get_num_threads(),
        "cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cuda.matmul.allow_fp16_reduced_precision_reduction": (
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "cuda.matmul.allow_bf16_reduced_precision_reduction": (
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
    }
    return settings


def _watched(attr: str, value) -> bool:
    """Whether ``attr`` of a watched module is a public callable the check follows."""
    if attr in _SKIP or (attr.startswith("__") and attr not in ("__call__", "__init__", "__new__")):
        return False
    return callable(value) or isinstance(value, (staticmethod, classmethod, property))


def _identities() -> dict[str, dict[str, int]]:
    """Per watched module, the identity of each of its public callables by attribute name."""
    ids: dict[str, dict[str, int]] = {}
    for modname, obj in _WATCHED_MODULES.items():
        ids[modname] = {attr: id(value) for attr, value in list(vars(obj).items()) if _watched(attr, value)}
    return ids


def _patched(identities: dict[str, dict[str, int]]) -> list[str]:
    """``module.attr`` of every recorded callable now bound to another object, and of every
    callable added since (``torch.Tensor.add`` set on the class shadows the C base's method),
    where torch did not define the new one (``_defined_in_torch``); one removed counts as
    unchanged. One pass over each namespace with no string built per attribute: the check runs
    after every candidate command, and building every key took ~2 ms of each."""
    found = []
    for modname, recorded in identities.items():
        for attr, value in list(vars(_WATCHED_MODULES[modname]).items()):
            ident = recorded.get(attr)
            if ident == id(value) or (ident is None and not _watched(attr, value)):
                continue
            if not _defined_in_torch(value):
                found.append(f"{modname}.{attr}")
    return sorted(found)


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def _defined_in_torch(obj) -> bool:
    """Whether ``obj``'s code lives in torch's own package: torch replaces some of its functions
    lazily (torch.compile wraps ``torch.manual_seed`` and ``nn.Module.__init__``), which is not a
    candidate patching them. A candidate cannot make its own code appear to come from there
    without editing code objects, which the static checker rejects."""
    target = inspect.unwrap(obj) if callable(obj) else obj
    code = getattr(target, "__code__", None)
    filename = code.co_filename if code is not None else None
    if filename is None:
        try:
            filename = inspect.getfile(target)
        except TypeError:
            return False
    return os.path.abspath(filename).startswith(_TORCH_DIR + os.sep)


@dataclass
class Snapshot:
    identities: dict[str, dict[str, int]] = field(default_factory=_identities)
    numerics: dict[str, object] = field(default_factory=numeric_settings)
    children: set[int] = field(default_factory=lambda: set(child_pids()))

    def violations(self) -> list[str]:
        """What changed since the snapshot, restoring numeric settings as it goes."""
        found: list[str] = []
        patched = _patched(self.identities)
        if patched:
            shown = ", ".join(patched[:5]) + (" ..." if len(patched) > 5 else "")
            found.append(f"patched library functions: {shown}")
        numerics = numeric_settings()
        changed = sorted(k for k, v in self.numerics.items() if numerics[k] != v)
        if changed:
            found.append(f"changed process-wide numeric settings: {', '.join(changed)}")
            self.restore_numerics()
        kids = [pid for pid in child_pids() if pid not in self.children]
        if kids:
            found.append(f"left {len(kids)} child process(es) running (pids {', '.join(map(str, kids[:5]))})")
        return found

    def restore_numerics(self) -> None:
        n = self.numerics
        torch.set_num_threads(n["num_threads"])
        torch.set_float32_matmul_precision(n["float32_matmul_precision"])
        torch.set_default_dtype(n["default_dtype"])
        torch.use_deterministic_algorithms(n["deterministic"])
        torch.set_grad_enabled(n["grad_enabled"])
        torch.backends.cudnn.allow_tf32 = n["cudnn.allow_tf32"]
        torch.backends.cuda.matmul.allow_tf32 = n["cuda.matmul.allow_tf32"]
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = n[
            "cuda.matmul.allow_fp16_reduced_precision_reduction"
        ]
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = n[
            "cuda.matmul.allow_bf16_reduced_precision_reduction"
        ]
