"""Staged timing rounds (``interleaved.staged_rounds``, ``RankBase.run_staged``): the reference's
ranks draw each round's inputs, both sides' blocks get them with the command and send every
call's outputs back with the reply, and the reference's ranks project both. Only the calls (with
the flush and barrier before each) and the transfers lie inside a judged span, so the clock check
can be tight: a candidate that does the reference's work and reports a tenth of it, which
unstaged rounds credited 5-19x on small CPU calls (``benchmarks/results/clock_slack_cpu.md``), is
caught; so is one that forges two blocks of three. Real rank processes, static checker off."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from benchmarks.clock_slack import copy_of
from services.worker.evaluator import EvalSettings, Evaluator
from services.worker.evaluator.interleaved import staged_rounds

HERE = Path(__file__).parent
ADVERSARIAL, WORKLOADS = HERE / "adversarial", HERE / "workloads"
WORKLOAD = WORKLOADS / "linear_allreduce.py"
SETTINGS = EvalSettings.for_device("cpu", min_iters=5)

#: A candidate that patches the staged block to send back fewer calls' outputs than it ran.
DROPS_CALLS = '''import torch
_rank = getattr(torch, "sys").modules["services.worker.evaluator.rank"]
_real = _rank.RankBase.run_staged


def _fewer(self, *args, **kwargs):
    reply = _real(self, *args, **kwargs)
    reply["calls"]["count"] = 1  # says it ran one call
    return reply


_rank.RankBase.run_staged = _fewer
'''


def test_a_block_that_fits_is_staged_whole():
    assert staged_rounds(100, 2, 1000, 1000, SETTINGS) == (2, 50)


def test_blocks_shrink_to_fit_and_rounds_grow_to_an_even_number():
    fit = SETTINGS.staged_block_bytes // (3 << 20)  # 21 calls of 3 MiB
    rounds, per_block = staged_rounds(100, 2, 1 << 20, 2 << 20, SETTINGS)
    assert per_block == fit and rounds % 2 == 0 and rounds * per_block >= 100


def test_rounds_stop_at_the_cap_with_fewer_calls():
    s = dataclasses.replace(SETTINGS, staged_max_rounds=8)
    rounds, per_block = staged_rounds(100, 2, s.staged_block_bytes // 4, 0, s)
    assert (rounds, per_block) == (8, 4)  # 32 calls: fewer than 100, more than min_iters


def test_not_staged_where_it_cannot_be():
    assert staged_rounds(100, 2, None, 1000, SETTINGS) is None  # inputs the judge cannot send
    assert staged_rounds(100, 2, SETTINGS.staged_block_bytes, 1, SETTINGS) is None  # not one call fits
    assert staged_rounds(100, 2, 1000, 1000, dataclasses.replace(SETTINGS, staged_blocks=False)) is None
    assert staged_rounds(100, 2, 1000, 1000, dataclasses.replace(SETTINGS, device_memory_limit_bytes=8 << 20)) is None
    tight = dataclasses.replace(SETTINGS, staged_max_rounds=2)
    assert staged_rounds(100, 2, tight.staged_block_bytes // 2, 0, tight) is None  # 4 calls < min_iters


@pytest.fixture(scope="module")
def staged():
    settings = EvalSettings.for_device("cpu", static_check=False, load_timeout_s=20.0, trials=3)
    assert settings.staged_blocks
    with Evaluator("cpu", settings) as ev:
        yield ev


def _text(result) -> str:
    return "\n".join([result.summary(), result.error.message if result.error else ""])


def test_an_honest_copy_is_staged_and_correct(staged, tmp_path):
    result = staged.evaluate(WORKLOAD, copy_of(WORKLOAD, 1.0, tmp_path), world_size=2)
    assert result.correct, _text(result)
    assert result.timing.clock_check.staged, result.summary()


def test_the_reference_s_work_reported_a_tenth_is_caught(staged, tmp_path):
    """The forger of ``benchmarks/clock_slack.py``: the reference's own model, the rank's clock
    scaled by a tenth in every block (credited 5-19x by unstaged rounds). One reporting half is
    not caught on the CPU (credited 1.6-1.9x, inside the 2-core machine's own noise:
    ``benchmarks/results/clock_slack_cpu.md``)."""
    result = staged.evaluate(WORKLOAD, copy_of(WORKLOAD, 0.1, tmp_path), world_size=2)
    assert result.status == "rejected" and "own clock disagrees" in _text(result), _text(result)
    assert "staged blocks" in _text(result)


def test_a_clock_forged_in_two_blocks_of_three_is_caught(staged):
    result = staged.evaluate(WORKLOAD, ADVERSARIAL / "forges_clock_in_most_blocks.py", world_size=2)
    assert result.status == "rejected" and "own clock disagrees" in _text(result), _text(result)


@pytest.mark.parametrize("name", ["hides_timed_outputs", "computes_only_last_call", "projects_by_shortcut"])
def test_attacks_on_the_unstaged_block_fail_on_a_staged_one(staged, name):
    """Each hands back outputs of other inputs (or zeros) in timed calls; a staged block sends
    every call's outputs and the reference's ranks project them (the patched projector of
    ``projects_by_shortcut`` is never asked), or judge the round's last call whole."""
    result = staged.evaluate(WORKLOAD, ADVERSARIAL / f"{name}.py", world_size=2)
    flags = "\n".join(result.flags)
    assert result.status == "incorrect", _text(result) + flags
    assert "computes only some of the timed calls" in flags or "a timed call's outputs were wrong" in flags, flags


def test_a_block_that_sends_back_fewer_calls_is_rejected(staged, tmp_path):
    path = tmp_path / "drops_calls.py"
    path.write_text(DROPS_CALLS + copy_of(WORKLOAD, 1.0, tmp_path).read_text())
    result = staged.evaluate(WORKLOAD, path, world_size=2)
    assert result.status == "rejected" and "did not send the outputs of its" in _text(result), _text(result)


def test_a_block_whose_work_is_done_in_its_first_call_is_rejected(staged):
    """``front_loads_block.py``: every output right and every call's time honest, but the block's
    work done in its first call: credited 295x against medians alone; its calls' mean is hundreds
    of times its median, the reference's under twice (``kloom.speedup.judged_times``)."""
    result = staged.evaluate(WORKLOAD, ADVERSARIAL / "front_loads_block.py", world_size=2)
    assert result.status == "rejected" and "timed calls are not alike" in _text(result), _text(result)
