"""Hangs, aborts, the device-memory bound, fp8 outputs and declared precision (issue 20 items 2
and 6, issue 21 item 2), on the CPU at world size 1 and 2 with tiny shapes. The evaluator's own
per-call limits are set far past the test's patience: what ends a hang is the judge's bound."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.evaluator.precision import PrecisionError, declared

HERE = Path(__file__).parent
#: What a test's bound allows beyond the limit it is about: killing the ranks and starting the pool
#: again. On CI's two cores a deadlock's evaluation once took 25.04 s against 10 + 15; the limits
#: these tests tell apart are 300 s (the call limit), so 30 s of room keeps them apart.
AFTER_S = 30
WORKLOADS, ADVERSARIAL, CANDIDATES = HERE / "workloads", HERE / "adversarial", HERE / "candidates"
LINEAR, BIG, FP8 = WORKLOADS / "linear_allreduce.py", WORKLOADS / "big_inputs.py", WORKLOADS / "fp8_output.py"
MiB = 1 << 20

HANGS_AFTER_FIRST_CALL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        while self.calls > 1:  # spins from its second call on: CPU busy, no progress
            x = x + 1
        return torch.relu(x) * 2
'''

HONEST_BIG = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x).mul_(2)
'''


def _settings(**overrides) -> EvalSettings:
    base = dict(static_check=False, timing_budget_s=0.1, min_iters=3, trials=2, load_timeout_s=300.0, call_timeout_s=300.0,
                timing_timeout_s=300.0)
    return EvalSettings.for_device("cpu", **{**base, **overrides})


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator("cpu", _settings()) as ev:
        yield ev


def test_a_deadlock_ends_on_no_progress_not_on_the_call_limit(evaluator):
    started = time.monotonic()
    result = evaluator.evaluate(LINEAR, ADVERSARIAL / "deadlock.py", world_size=2)
    took = time.monotonic() - started
    assert result.status == "timeout" and "no progress" in result.error.message, result.summary()
    assert took < 10 + AFTER_S, took  # stall_s, plus killing and the pool's start


def test_a_hang_after_the_first_call_ends_within_the_hang_bound(evaluator):
    """max(hang_floor_s = 10 s, 20 x the reference's call time) + 4 s per GiB moved, not the 300 s
    call limit."""
    evaluator.evaluate(BIG, candidate_source=HONEST_BIG, world_size=1)  # a warm pool
    started = time.monotonic()
    result = evaluator.evaluate(BIG, candidate_source=HANGS_AFTER_FIRST_CALL, world_size=1)
    took = time.monotonic() - started
    assert result.status == "timeout" and "did not finish trial within 10 s" in result.error.message, result.summary()
    assert took < 10 + AFTER_S, took


def test_the_hang_bound_grows_with_the_bytes_a_trial_moves():
    """A trial hands its inputs and outputs between processes: on a GPU, level1_19's 6 GiB ReLU
    took longer than the 10 s floor for that alone. Here 2 MiB (input and output) at 2048 s/GiB
    add 4 s to a 2 s floor."""
    with Evaluator("cpu", _settings(hang_floor_s=2.0, hang_s_per_gib=2048.0)) as ev:
        result = ev.evaluate(BIG, candidate_source=HANGS_AFTER_FIRST_CALL, world_size=1)
    assert result.status == "timeout" and "did not finish trial within 6 s" in result.error.message, result.summary()


def test_a_hanging_reference_ends_on_no_progress(evaluator, tmp_path):
    """Issue 20: a reference that hung held the only worker for 663 s."""
    hangs = tmp_path / "hangs.py"
    hangs.write_text(BIG.read_text().replace("return torch.relu(x) * 2", "__import__('time').sleep(3600)"))
    started = time.monotonic()
    result = evaluator.evaluate(hangs, candidate_source=HONEST_BIG, world_size=1)
    took = time.monotonic() - started
    assert result.status == "timeout" and "no progress" in result.error.message, result.summary()
    assert took < 10 + AFTER_S, took


def test_abort_ends_an_evaluation_within_seconds(evaluator):
    timer = threading.Timer(1.0, evaluator.abort, args=("cancelled by the user",))
    started = time.monotonic()
    timer.start()
    result = evaluator.evaluate(LINEAR, ADVERSARIAL / "spins_forever.py", world_size=2)
    took = time.monotonic() - started
    timer.join()
    assert result.status == "stopped" and result.error.message == "cancelled by the user", result.summary()
    assert took < 1.0 + AFTER_S, took
    assert evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2).correct


def test_an_abort_that_comes_before_any_rank_runs_still_ends_the_evaluation(monkeypatch):
    """A cancel that arrives while the pools are starting (no rank process to kill yet: a fork
    server starting, say) ends the evaluation as soon as the ranks are there, not after the
    candidate's own limits (300 s here)."""
    from services.worker.evaluator.pool import RankPool

    begin = RankPool.begin
    with Evaluator("cpu", _settings()) as ev:
        def abort_first(self):
            monkeypatch.setattr(RankPool, "begin", begin)
            ev.abort("cancelled while starting")
            begin(self)

        monkeypatch.setattr(RankPool, "begin", abort_first)
        started = time.monotonic()
        result = ev.evaluate(LINEAR, ADVERSARIAL / "spins_forever.py", world_size=2)
        took = time.monotonic() - started
        assert result.status == "stopped" and result.error.message == "cancelled while starting", result.summary()
        assert took < AFTER_S, took
        assert ev.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2).correct


def test_memory_stays_within_reference_plus_candidate_plus_one_output():
    """Inputs large against the limit: one trial's tensors at a time on each side, one copy of the
    outputs on the reference's side."""
    with Evaluator("cpu", _settings(device_memory_limit_bytes=8 * MiB)) as ev:
        result = ev.evaluate(BIG, candidate_source=HONEST_BIG, world_size=1)
    assert result.correct, result.summary()
    m = result.memory
    assert m.output_bytes == MiB
    assert m.reference_peak_bytes <= 3 * MiB  # its input, its output, the candidate's output copy
    assert m.candidate_peak_bytes <= 3 * MiB  # its input, its output and the copy taken at return
    assert m.evaluator_peak_bytes <= m.reference_peak_bytes + m.candidate_peak_bytes + m.output_bytes <= m.limit_bytes
    # Which step held the most, per side: the largest is the side's peak.
    steps = m.peaks_by_command
    assert steps["reference compare"] == 2 * MiB and steps["candidate trial"] == 3 * MiB, steps
    assert max(v for k, v in steps.items() if k.startswith("reference ")) == m.reference_peak_bytes
    assert max(v for k, v in steps.items() if k.startswith("candidate ")) == m.candidate_peak_bytes


@pytest.mark.parametrize("limit_mib, who", [(1.5, "the reference with its inputs and outputs"), (2.5, "leaving nothing for the candidate")])
def test_a_workload_that_cannot_fit_is_the_evaluators_resource_limit(limit_mib, who):
    with Evaluator("cpu", _settings(device_memory_limit_bytes=int(limit_mib * MiB))) as ev:
        result = ev.evaluate(BIG, candidate_source=HONEST_BIG, world_size=1)
    assert result.status == "resource_limit", result.summary()
    assert who in result.error.message and str(int(limit_mib * MiB)) in result.error.message
    assert "the reference failed" not in result.error.message


def test_fp8_outputs_are_checked_and_compared(evaluator):
    honest = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return (x / 2).to(torch.float8_e4m3fn)\n"
    assert evaluator.evaluate(FP8, candidate_source=honest, world_size=1).correct
    nan = honest.replace("(x / 2)", "(x * float('nan'))")
    result = evaluator.evaluate(FP8, candidate_source=nan, world_size=1)
    assert result.status == "incorrect" and "NaN" in result.summary(), result.summary()


def test_declared_precision_is_read_without_running_the_workload(tmp_path):
    tf32 = tmp_path / "tf32.py"
    tf32.write_text(LINEAR.read_text() + '\nPRECISION = "tf32"\n')
    assert declared(tf32) == "tf32" and declared(LINEAR) == "fp32"
    computed = tmp_path / "computed.py"
    computed.write_text(LINEAR.read_text() + '\nPRECISION = __import__("os").getenv("P")\n')
    with pytest.raises(PrecisionError, match="string literal"):
        declared(computed)
    with Evaluator("cpu", _settings()) as ev:
        assert ev.evaluate(tf32, ADVERSARIAL / "switches_on_tf32.py", world_size=1).correct
        assert ev.evaluate(computed, CANDIDATES / "correct.py", world_size=1).status == "workload_error"


def test_outputs_in_an_unsealed_file_are_refused_and_the_reference_lives_on(evaluator):
    """Large outputs travel in a memory file the reference's rank maps; one its sender could still
    cut short would kill that rank (SIGBUS) and be blamed on the reference."""
    result = evaluator.evaluate(BIG, ADVERSARIAL / "unseals_shared_outputs.py", world_size=1)
    assert not result.correct
    assert result.status in ("crashed", "runtime_error", "rejected"), result.summary()
    assert "not sealed" in (result.error.message if result.error else ""), result.summary()
    after = evaluator.evaluate(BIG, candidate_source=HONEST_BIG, world_size=1)
    assert after.correct, after.summary()
