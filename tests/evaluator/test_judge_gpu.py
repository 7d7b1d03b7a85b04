"""The judge's boundaries on one GPU (world size 1; ``benchmarks/gpu/judge.sh`` runs this file):
forged CUDA events, TF32 switched on or hidden, and the device-memory limit applied through the
caching allocator's per-process fraction. Static checker off throughout."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from services.worker.evaluator import EvalSettings, Evaluator

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")]

HERE = Path(__file__).parent
ADVERSARIAL, CANDIDATES, WORKLOADS = HERE / "adversarial", HERE / "candidates", HERE / "workloads"
LINEAR, BIG = WORKLOADS / "linear_allreduce.py", WORKLOADS / "big_inputs.py"
MiB = 1 << 20
HONEST_BIG = "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.relu(x).mul_(2)\n"


def _settings(**overrides) -> EvalSettings:
    """The machine's settings (``KLOOM_EVAL_*``: the GPU prelude may turn the network namespace
    off where NCCL cannot work in it), with the static checker off."""
    return dataclasses.replace(EvalSettings.from_env("cuda"), **{"static_check": False, "shapes": "ci", "timing_budget_s": 0.2, "trials": 3, **overrides})


@pytest.fixture(scope="module")
def gpu():
    with Evaluator("cuda", _settings(), devices=[0]) as ev:
        yield ev


def test_an_honest_candidate_passes_the_clock_check(gpu):
    result = gpu.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=1)
    assert result.correct, result.summary()
    assert result.timing.clock == "cuda_events" and result.timing.clock_check.ok, result.timing.clock_check


@pytest.mark.parametrize("name, status, text", [
    ("forges_clock", "rejected", "own clock disagrees with the judge's"),
    ("switches_on_tf32", "rejected", "precision flags"),
    ("hides_tf32", "incorrect", "outside"),
    ("computes_bf16", "incorrect", "outside"),
    ("finds_reference_via_gc", "incorrect", "outside"),
    ("computes_only_last_call", "incorrect", "computes only some of the timed calls"),
])
def test_attack_fails_on_a_gpu(gpu, name, status, text):
    result = gpu.evaluate(LINEAR, ADVERSARIAL / f"{name}.py", world_size=1)
    message = "\n".join([result.summary(), result.error.message if result.error else ""] + [c.message for t in result.trials for c in t.ranks])
    assert result.status == status and text in message, message


def test_work_left_running_on_the_gpu_while_the_reference_is_timed_is_caught(gpu):
    """The candidate's processes are stopped while the reference is timed, but kernels it queued
    run on; the reference's ranks probe the GPU before their blocks and wait for it to go quiet:
    work that outlasts the wait rejects the candidate, work that drains is waited out (flagged,
    and the speedup stays what the candidate earns), and an honest candidate is not flagged."""
    running = gpu.evaluate(LINEAR, ADVERSARIAL / "leaves_gpu_work_running.py", world_size=1)
    message = "\n".join([running.summary(), running.error.message if running.error else ""] + running.flags)
    assert running.status == "rejected" and "was not the reference's" in message, message
    draining = gpu.evaluate(LINEAR, ADVERSARIAL / "leaves_gpu_work_draining.py", world_size=1)
    assert draining.status in ("correct", "rejected"), draining.summary()
    if draining.correct:
        assert any(f.startswith("gpu_work_left_running") for f in draining.flags) and draining.speedup < 1.5, draining.summary()
    honest = gpu.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=1)
    assert honest.correct and not any("gpu_work_left_running" in f for f in honest.flags), honest.summary()


def test_the_memory_limit_holds_on_the_device():
    with Evaluator("cuda", _settings(device_memory_limit_bytes=512 * MiB), devices=[0]) as ev:
        fits = ev.evaluate(BIG, candidate_source=HONEST_BIG, world_size=1)
    assert fits.correct, fits.summary()
    m = fits.memory
    flush = 2 * max(torch.cuda.get_device_properties(0).L2_cache_size, 8 * MiB)  # the timer's cache-flush buffer
    # The reference's side holds, at its peak, each 1 MiB once or twice: the input and the copy
    # sent to the candidate, its output and relu's, the candidate's output and the comparison's
    # temporaries (measured 9 MiB beside the flush buffer on an H100).
    assert m.evaluator_peak_bytes <= m.limit_bytes and m.reference_peak_bytes <= 12 * MiB + flush, m
    with Evaluator("cuda", _settings(device_memory_limit_bytes=MiB), devices=[0]) as ev:
        tight = ev.evaluate(BIG, candidate_source=HONEST_BIG, world_size=1)
    assert tight.status == "resource_limit" and str(MiB) in tight.error.message, tight.summary()
    assert "the reference failed" not in tight.error.message


def test_each_side_holds_its_own_peak_and_one_copy_of_the_outputs(tmp_path):
    """The third-party issue's bound, side by side: the reference's side holds what the
    reference itself needs (input, relu's temporary, output) and the candidate's outputs it
    compares; the candidate's side its own (input, output) and the copy it takes at return to
    see late writes. Nothing of a trial survives into timing or of timing into the next trial."""
    size = 256 * MiB  # 8192 x 8192 float32, in and out
    workload = tmp_path / "big_256.py"
    workload.write_text(BIG.read_text().replace("N = 512 ", "N = 8192 "))
    with Evaluator("cuda", _settings(), devices=[0]) as ev:
        result = ev.evaluate(workload, candidate_source=HONEST_BIG, world_size=1)
    assert result.correct, result.summary()
    m = result.memory
    flush = 2 * max(torch.cuda.get_device_properties(0).L2_cache_size, 8 * MiB)
    slack = 128 * MiB  # the comparison's and the fingerprints' chunks, the projection's partials
    assert m.reference_peak_bytes <= 3 * size + flush + slack, m.peaks_by_command
    assert m.candidate_peak_bytes <= 3 * size + flush + slack, m.peaks_by_command
    assert {"reference run_trial", "reference time_block", "candidate trial", "candidate time_block"} <= set(m.peaks_by_command)
