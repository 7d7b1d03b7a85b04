"""Fixtures for the suite's reference tests: warm evaluators, one per world size, shared by every
test of the session and closed at its end. On the CPU the ranks talk over gloo, on GPUs over NCCL."""

from __future__ import annotations

from pathlib import Path

import pytest

from kloom.suite import find
from services.worker.evaluator import EvalSettings, Evaluator


class ReferenceRunner:
    """Runs suite workloads' references on ``device`` at one shape profile, one warm evaluator per
    world size. Timing is cut to a few calls: these tests check results, not speed."""

    def __init__(self, device: str = "cpu", shapes: str = "ci") -> None:
        self.device = device
        self._evaluators: dict[int, Evaluator] = {}
        self.settings = EvalSettings.for_device(
            device, shapes=shapes, warmup_iters=1, min_iters=2, max_iters=3, timing_budget_s=0.01
        )

    def evaluator(self, world_size: int) -> Evaluator:
        if world_size not in self._evaluators:
            self._evaluators[world_size] = Evaluator(self.device, self.settings)
        return self._evaluators[world_size]

    def __call__(self, workload: str | Path, world_size: int, seed: int = 0) -> list[dict]:
        """Per rank, what ``Evaluator.reference_io`` gives: ``state``, ``inputs``,
        ``inputs_after``, ``outputs``. ``workload`` is a suite workload's name or a file."""
        return self.evaluator(world_size).reference_io(_path(workload), world_size=world_size, seed=seed)

    def baseline(self, workload: str | Path, world_size: int):
        """The baseline protocol (one checked run, brief timing, the roofline) on the reference."""
        return self.evaluator(world_size).baseline(_path(workload), world_size=world_size)

    def release(self, world_size: int) -> None:
        """Stop the rank processes of one world size (the large ones hold memory and cores)."""
        evaluator = self._evaluators.pop(world_size, None)
        if evaluator is not None:
            evaluator.close()

    def close(self) -> None:
        for world_size in list(self._evaluators):
            self.release(world_size)


def _path(workload: str | Path) -> Path:
    return Path(workload) if str(workload).endswith(".py") else Path(find(str(workload)).path)


@pytest.fixture(scope="session")
def run_reference():
    """CPU (gloo) at ``ci`` shapes. ``run_reference(name_or_path, world_size, seed=0)``: the
    reference's per-rank records; ``run_reference.baseline(name_or_path, world_size)``: its
    baseline result."""
    runner = ReferenceRunner()
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def run_reference_cuda():
    """As ``run_reference``, on GPUs (NCCL) at the float32 ``ci`` shapes."""
    runner = ReferenceRunner("cuda", "ci")
    yield runner
    runner.close()


@pytest.fixture(scope="session")
def run_reference_gpu_shapes():
    """As ``run_reference``, on GPUs (NCCL) at the realistic bf16 ``gpu`` shapes."""
    runner = ReferenceRunner("cuda", "gpu")
    yield runner
    runner.close()
