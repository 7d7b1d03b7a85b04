"""Rounds sized to the work (``EvalSettings.timing_min_block_s``): short calls are timed in two
rounds, and where the clock check fails over those, the remaining rounds run before it decides,
so that one block the machine slowed does not reject an honest candidate, while a forged clock
still fails over every round."""

from __future__ import annotations

from pathlib import Path

from services.worker.evaluator import EvalSettings, Evaluator, interleaved

HERE = Path(__file__).parent
WORKLOAD = HERE / "workloads" / "linear_allreduce.py"
CANDIDATE = HERE / "candidates" / "correct.py"
SETTINGS = EvalSettings.for_device("cpu", static_check=False, load_timeout_s=20.0, trials=2)
#: Two rounds whatever the machine's pace (no block would hold 10 s of calls).
TWO_ROUNDS = EvalSettings.for_device("cpu", static_check=False, load_timeout_s=20.0, trials=2, timing_min_block_s=10.0)


def _timed_blocks(monkeypatch, slow_first_candidate_ms: float = 0.0) -> list[str]:
    """Record the side of every timed block; with ``slow_first_candidate_ms``, the judge's clock
    reads the candidate's first timed block that much longer (the machine stalled beside it)."""
    sides: list[str] = []
    block = interleaved.Timing._block

    def recording(self, side, other, iters, *args, **kwargs):
        got = block(self, side, other, iters, *args, **kwargs)
        if (kwargs.get("projection_seed") is not None or kwargs.get("per_rank") is not None):  # a round's block, not a warm-up
            if side.role == "candidate" and "candidate" not in sides:
                got.wall_ms += slow_first_candidate_ms
            sides.append(side.role)
        return got

    monkeypatch.setattr(interleaved.Timing, "_block", recording)
    return sides


def test_short_calls_are_timed_in_two_rounds(monkeypatch):
    sides = _timed_blocks(monkeypatch)
    checks: list[tuple[bool, int]] = []  # each clock check's verdict and the rounds it covered
    check = interleaved.Timing._check

    def recording(self, blocks, per_block):
        got = check(self, blocks, per_block)
        checks.append((got.ok, got.blocks))
        return got

    monkeypatch.setattr(interleaved.Timing, "_check", recording)
    with Evaluator("cpu", SETTINGS) as ev:
        result = ev.evaluate(WORKLOAD, CANDIDATE, world_size=1)
    assert result.correct, result.summary()
    # Two rounds on a quiet machine (the calls here take ~0.2 ms); a loaded one makes each call
    # slower and may give it four, or every round where its calls fill a block each. The orders
    # alternate. Every round also where the clock check failed over the first ones (a loaded
    # machine can stall a block).
    rounds = result.timing.clock_check.blocks
    assert len(sides) == 2 * rounds and sides[:4] == ["reference", "candidate", "candidate", "reference"]
    assert checks, "the clock was not checked before the verdict"
    first_ok, first_rounds = checks[0]
    if first_rounds == SETTINGS.timing_rounds:  # the sizing cut nothing: one check over every round
        assert rounds == SETTINGS.timing_rounds and len(checks) == 1
    elif first_ok:
        assert 2 <= rounds == first_rounds < SETTINGS.timing_rounds and rounds % 2 == 0
    else:
        assert rounds == SETTINGS.timing_rounds


def test_one_stalled_block_runs_the_remaining_rounds_instead_of_rejecting(monkeypatch):
    sides = _timed_blocks(monkeypatch, slow_first_candidate_ms=2000.0)
    with Evaluator("cpu", TWO_ROUNDS) as ev:
        result = ev.evaluate(WORKLOAD, CANDIDATE, world_size=1)
    assert result.correct, result.summary()
    assert sides.count("candidate") == SETTINGS.timing_rounds == result.timing.clock_check.blocks
    assert sides.count("reference") == SETTINGS.timing_rounds


def test_a_clock_wrong_in_every_block_fails_over_every_round(monkeypatch):
    # Every candidate block 2 s longer on the judge's clock than the candidate says: what a
    # forged clock looks like from the judge's side.
    sides: list[str] = []
    block = interleaved.Timing._block

    def forged(self, side, other, iters, *args, **kwargs):
        got = block(self, side, other, iters, *args, **kwargs)
        if (kwargs.get("projection_seed") is not None or kwargs.get("per_rank") is not None):
            sides.append(side.role)
            if side.role == "candidate":
                got.wall_ms += 2000.0
        return got

    monkeypatch.setattr(interleaved.Timing, "_block", forged)
    with Evaluator("cpu", TWO_ROUNDS) as ev:
        result = ev.evaluate(WORKLOAD, CANDIDATE, world_size=1)
    assert result.status == "rejected" and result.error.kind == "clock", result.summary()
    assert sides.count("candidate") == SETTINGS.timing_rounds
