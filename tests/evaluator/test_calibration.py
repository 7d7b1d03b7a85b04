"""The float32 tolerance calibrated by the reference's own error against its float64 run
(``calibration.py``): a deep network whose honest float32 candidates lie beyond 1e-4 of it is
judged by how far the reference itself is from the exact result, and lower precision is still
caught; the float64 run leaves the reference as it was."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.evaluator.calibration import Calibration, OwnError, float64_run, own_error, widening
from services.worker.evaluator.compare import DEFAULT_TOLERANCE

HERE = Path(__file__).parent
ADVERSARIAL, CANDIDATES, WORKLOADS = HERE / "adversarial", HERE / "candidates", HERE / "workloads"
DEEP = WORKLOADS / "deep_bn_mlp.py"


def _evaluate(candidate: Path, device: str = "cpu", **settings):
    # A fixed seed: the network's conditioning differs between input draws.
    base = EvalSettings.for_device(device, shapes="ci", call_timeout_s=8.0 if device == "cpu" else 25.0, load_timeout_s=20.0 if device == "cpu" else 90.0,
                                   timing_budget_s=0.2, min_iters=5)
    with Evaluator(device, dataclasses.replace(base, seed=3, **settings), **({"devices": [0]} if device == "cuda" else {})) as ev:
        return ev.evaluate(DEEP, candidate, world_size=1)


@pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")])])
def test_a_deep_networks_honest_candidate_is_judged_by_the_references_own_float32_error(device):
    """The network computed in float64 (closer to the exact result than the reference) is
    ``incorrect`` at the fixed tolerance and ``correct`` once calibrated; TF32-rounded products
    stay ``incorrect`` under the widened tolerance."""
    honest = CANDIDATES / "float64_inside.py"
    fixed = _evaluate(honest, device, calibrate_tolerance=False)
    assert fixed.status == "incorrect", fixed.summary()
    assert "float32_tolerance" not in fixed.environment
    calibrated = _evaluate(honest, device)
    assert calibrated.status == "correct", calibrated.summary()
    record = calibrated.environment["float32_tolerance"]
    assert record["trials"] >= 2 and record["elementwise"] > 1.0 and record["elementwise_scale"] > 1.0, record
    assert any(f.startswith("float32_tolerance_widened") for f in calibrated.flags), calibrated.flags
    cheat = _evaluate(ADVERSARIAL / "rounds_to_tf32.py", device)
    assert cheat.status == "incorrect", cheat.summary()
    assert cheat.environment["float32_tolerance"]["elementwise_scale"] > 1.0


def test_a_workload_of_several_ranks_is_not_calibrated(evaluator):
    result = evaluator.evaluate(WORKLOADS / "linear_allreduce.py", CANDIDATES / "correct.py", world_size=2)
    assert result.status == "correct", result.summary()
    assert "several ranks" in result.environment["float32_tolerance"]["note"]
    assert not any(f.startswith("float32_tolerance_widened") for f in result.flags)


def test_inputs_past_the_bound_are_not_run_in_float64():
    """The float64 copies of large inputs would double the reference's share of the device
    (``calibration_max_input_bytes``): the tolerance stays as set, and the record says why."""
    result = _evaluate(CANDIDATES / "float64_inside.py", calibration_max_input_bytes=512)
    assert result.status == "incorrect", result.summary()
    record = result.environment["float32_tolerance"]
    assert "calibration_max_input_bytes" in record["note"] and record["elementwise_scale"] == 1.0, record
    assert not any(f.startswith("float32_tolerance_widened") for f in result.flags)


class _Stateful(nn.Module):
    """Batch norm statistics, dropout and a tensor cached in the input's dtype on first call."""

    def __init__(self):
        super().__init__()
        self.fc, self.bn, self.drop = nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5)
        self.cache = None
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.cache is None:
            self.cache = torch.ones_like(x)
        return self.drop(self.bn(self.fc(x))) + self.cache


def test_the_float64_run_leaves_the_reference_and_the_generators_as_they_were():
    torch.manual_seed(0)
    model, x = _Stateful(), torch.randn(6, 8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    wide, why, _ = float64_run(model, [x], torch.device("cpu"))
    assert why == "" and wide[0].dtype == torch.float64
    assert model.cache is None and model.calls == 0 and model.fc.weight.dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)
    out = model(x)  # the float32 call draws the same dropout mask the float64 copy drew
    own = own_error([out], wide, DEFAULT_TOLERANCE)
    assert not own.skipped and own.norm < 1e-6, own


def test_what_is_not_calibrated_says_why():
    half = nn.Linear(4, 4).to(torch.bfloat16)
    assert "bfloat16" in float64_run(half, [torch.randn(2, 4, dtype=torch.bfloat16)], torch.device("cpu"))[1]

    class NoDouble(nn.Module):
        def forward(self, x):
            if x.dtype == torch.float64:
                raise RuntimeError("no float64 kernel")
            return x

    assert "no float64 kernel" in float64_run(NoDouble(), [torch.randn(3)], torch.device("cpu"))[1]
    assert "float16" in own_error([torch.ones(3, dtype=torch.float16)], [torch.ones(3, dtype=torch.float64)], DEFAULT_TOLERANCE).skipped
    far = own_error([torch.ones(8)], [torch.full((8,), 2.0, dtype=torch.float64)], DEFAULT_TOLERANCE)
    assert far.norm == pytest.approx(0.5)
    assert widening(far, 5e-5, 4.0, 40.0, 1e-3).elementwise == 1.0  # beyond rounding: not used
    assert "beyond rounding" in widening(far, 5e-5, 4.0, 40.0, 1e-3).note


def test_the_widening_is_the_largest_own_error_seen_times_the_factor_within_its_cap():
    cal = Calibration(norm_bound=5e-5, factor=4.0, max_scale=40.0, max_error=1e-3)
    w = cal.add(OwnError(norm=2e-5, elementwise=0.5))
    assert (w.elementwise, w.norm) == pytest.approx((2.0, 1.6)) and cal.active
    w = cal.add(OwnError(norm=1e-5, elementwise=3.0))  # a better conditioned draw narrows nothing
    assert (w.elementwise, w.norm) == pytest.approx((12.0, 1.6))
    w = cal.add(OwnError(norm=9e-4, elementwise=100.0))
    assert (w.elementwise, w.norm) == pytest.approx((40.0, 40.0))  # the cap
    w = cal.add(OwnError(skipped="the float64 copy failed"))  # a failed run ends the widening
    assert (w.elementwise, w.norm) == (1.0, 1.0) and not cal.active
    quiet = Calibration(norm_bound=5e-5, factor=4.0, max_scale=40.0, max_error=1e-3)
    assert quiet.add(OwnError(norm=1e-7, elementwise=0.01)).elementwise == 1.0
    assert not quiet.active  # far inside the tolerance: no more float64 runs
    slow = Calibration(norm_bound=5e-5, factor=4.0, max_scale=40.0, max_error=1e-3, budget_s=10.0)
    assert slow.add(OwnError(norm=2e-5, elementwise=0.5, seconds=4.0)).elementwise == pytest.approx(2.0) and slow.active
    assert slow.add(OwnError(norm=2e-5, elementwise=0.8, seconds=7.0)).elementwise == pytest.approx(3.2)
    assert not slow.active and slow.record()["total_seconds"] == pytest.approx(11.0)  # the budget spent: the widening stands
