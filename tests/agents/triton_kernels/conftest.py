"""Kernel strategy tests: one CPU evaluator whose ranks run Triton in its interpreter
(``TRITON_INTERPRET=1`` reaches them through the sandbox's environment; it is set only while the
tests that need it run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services.worker.evaluator import EvalSettings, Evaluator

# kernel_helpers is imported by module name, as agent_helpers is.
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def interpreted_evaluator():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "1")
        settings = EvalSettings.for_device("cpu", timing_budget_s=0.01, min_iters=1, max_iters=2, warmup_iters=1, trials=1)
        with Evaluator("cpu", settings) as ev:
            yield ev
