"""Fixture checkouts (written for these tests, in KernelBench's and ParallelKernelBench's layouts)
and one CPU evaluator shared by the tests that evaluate imported workloads."""

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KLOOM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def kernelbench_checkout(tmp_path):
    return Path(shutil.copytree(FIXTURES / "kernelbench", tmp_path / "KernelBench-checkout"))


@pytest.fixture
def pkb_checkout(tmp_path):
    return Path(shutil.copytree(FIXTURES / "pkb", tmp_path / "ParallelKernelBench"))


@pytest.fixture(scope="session")
def evaluator():
    from services.worker.evaluator import EvalSettings, Evaluator

    settings = EvalSettings.for_device("cpu", trials=3, timing_budget_s=0.1, recheck_reference=False)
    with Evaluator("cpu", settings) as ev:
        yield ev
