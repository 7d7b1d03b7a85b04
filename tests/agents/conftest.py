"""What the strategist and loop tests share: one warm CPU evaluator per module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from services.worker.evaluator import EvalSettings, Evaluator

# agent_helpers is imported by module name (tests/agents is not a package: it would shadow ``agents``).
if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator("cpu", EvalSettings.for_device("cpu", timing_budget_s=0.1, min_iters=3)) as ev:
        yield ev
