"""The rank sandbox on a GPU host, with torch alone (the GPU image has no service packages, so this
lives beside the evaluator's tests rather than the reliability ones): NCCL ranks in the pool's
network namespace, with /run hidden and (as root) capabilities dropped, judge an honest candidate
correct, and the pool says which boundaries held."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from services.worker.evaluator import EvalSettings, Evaluator, sandbox

HERE = Path(__file__).parent
WORKLOADS, CANDIDATES = HERE / "workloads", HERE / "candidates"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.device_count() >= 2), reason="needs 2 CUDA GPUs"),
]


def test_nccl_runs_inside_the_sandbox():
    # Isolation on whatever the environment says: this test is the check that it works with NCCL.
    settings = dataclasses.replace(EvalSettings.for_device("cuda", call_timeout_s=60.0, timing_budget_s=0.2), isolate_network=True)
    with Evaluator("cuda", settings) as evaluator:
        enforced = evaluator.pool(2).isolation.enforced()
        result = evaluator.evaluate(WORKLOADS / "linear_allreduce.py", CANDIDATES / "correct.py", world_size=2)
    print(json.dumps(enforced, indent=1))
    assert result.correct, result.summary()
    if sandbox.platform().netns:
        assert enforced["network"].startswith("own namespace")
