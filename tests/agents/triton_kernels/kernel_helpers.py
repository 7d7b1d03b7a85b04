"""Helpers of the kernel strategy tests (imported by name: conftest.py puts this folder on the path)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from kloom.opgraph import OpGraph
from services.worker.evaluator.tracing import trace_call

WORKLOADS = Path(__file__).resolve().parent / "workloads"


def load_workload(name: str):
    path = WORKLOADS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_kl_test_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def traced(name: str) -> OpGraph:
    """The op graph of one call of the fixture workload ``name`` (in this process)."""
    module = load_workload(name)
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs())
    return OpGraph.from_dict(trace_call(model, module.get_inputs())["op_graph"])
