"""Evaluators shared by the evaluator tests: one warm pool per device for the whole module."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from services.worker.evaluator import EvalSettings, Evaluator

HERE = Path(__file__).parent
WORKLOADS = HERE / "workloads"
ADVERSARIAL = HERE / "adversarial"
CANDIDATES = HERE / "candidates"

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() and torch.cuda.device_count() >= 2 else [])


def fast_settings(device: str) -> EvalSettings:
    """The real protocol with short time limits, so that hanging candidates end quickly."""
    return EvalSettings.for_device(
        device,
        shapes="ci",
        call_timeout_s=8.0 if device == "cpu" else 25.0,
        load_timeout_s=20.0 if device == "cpu" else 90.0,
        timing_timeout_s=60.0,
        timing_budget_s=0.2,
        min_iters=5,
    )


@pytest.fixture(scope="module", params=DEVICES)
def evaluator(request):
    device = request.param
    with Evaluator(device, fast_settings(device)) as ev:
        yield ev
