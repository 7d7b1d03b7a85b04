"""Autotuning choices read from a module and pinned in another (``kernels/tuning.py``), on Triton's
real autotuner under the interpreter: a pinned key runs the pinned configuration without timing
any, and a pin can only choose among the autotuner's own configurations."""

import pytest
import torch
import triton
import triton.language as tl

from kernels import tuning
from kernels.tuning import adopt_tuned, seed_tuned, tuned_choices

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((16, 1), (32, 2), (64, 4))]
TIMED: list[int] = []


def _counting_bench(kernel_call, quantiles):
    """Runs the configuration once and says it took no time (the first one then wins)."""
    TIMED.append(1)
    kernel_call()
    return [0.0, 0.0, 0.0]


@triton.jit
def kl_tuning_double(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < n
    tl.store(out_ptr + idx, 2.0 * tl.load(x_ptr + idx, mask=mask), mask=mask)


def _tuner():
    return triton.autotune(configs=CONFIGS, key=["n"], do_bench=_counting_bench)(kl_tuning_double)


def _run(tuner, n: int) -> torch.Tensor:
    x = torch.randn(n)
    out = torch.empty_like(x)
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    assert torch.equal(out, 2 * x)
    return out


def _pin(n: int, block: int, warps: int) -> dict:
    return {"kernel": "kl_tuning_double", "key": [n, "torch.float32", "torch.float32"], "kwargs": {"BLOCK": block},
            "num_warps": warps, "num_stages": 3}


@pytest.fixture(autouse=True)
def _no_pins():
    tuning._KL_TUNED_PINS.clear()
    TIMED.clear()
    yield
    tuning._KL_TUNED_PINS.clear()


def test_what_the_autotuner_chose_is_read_from_the_module():
    tuner = _tuner()
    _run(tuner, 100)
    assert len(TIMED) == 3, "every configuration timed"
    assert tuned_choices({"kernel": tuner, "other": 3}) == [_pin(100, 16, 1)]
    # One held in a dict at the module's top level (those made per configuration list) too.
    assert tuned_choices({"tuners": {("k",): tuner}}) == [_pin(100, 16, 1)]
    single = triton.autotune(configs=CONFIGS[:1], key=["n"], do_bench=_counting_bench)(kl_tuning_double)
    _run(single, 100)
    assert tuned_choices({"single": single}) == [], "one configuration: nothing was chosen"


def test_a_pinned_key_runs_its_configuration_without_timing_any():
    tuner = _tuner()
    assert seed_tuned([tuner], [_pin(200, 64, 4)]) == 1
    _run(tuner, 200)
    assert TIMED == [], "the pinned key was not timed"
    assert tuner.best_config.kwargs == {"BLOCK": 64} and tuner.best_config.num_warps == 4
    _run(tuner, 300)  # a key no pin names is tuned as before
    assert len(TIMED) == 3 and tuner.best_config.kwargs == {"BLOCK": 16}


def test_a_pin_chooses_among_the_autotuners_own_configurations_only():
    tuner = _tuner()
    # BLOCK 128 is no configuration of this kernel; 32 with 8 warps neither (its warps are 2).
    assert seed_tuned([tuner], [_pin(400, 128, 4), _pin(400, 32, 8)]) == 0
    _run(tuner, 400)
    assert len(TIMED) == 3 and tuner.best_config.kwargs == {"BLOCK": 16}
    other = {**_pin(500, 64, 4), "kernel": "another_kernel"}
    assert seed_tuned([tuner], [other]) == 0, "a pin for another kernel's name"


def test_an_autotuner_made_after_seeding_takes_its_pins_where_it_is_made():
    assert seed_tuned([], [_pin(600, 32, 2)]) == 0  # nothing to pin yet
    tuner = adopt_tuned(_tuner())
    _run(tuner, 600)
    assert TIMED == [] and tuner.best_config.kwargs == {"BLOCK": 32}
