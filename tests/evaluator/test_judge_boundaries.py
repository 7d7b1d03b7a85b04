"""Issue 20's attacks on the judge, written as hostile candidates and run with the static checker
switched off (it is a filter, not the defence): each one fails because of where the judge keeps
the reference, the comparison and the clock (``docs/reliability.md``, "The judge")."""

from __future__ import annotations

import dataclasses

from pathlib import Path

import pytest

from services.worker.evaluator import EvalSettings, Evaluator, interleaved, projection_check

HERE = Path(__file__).parent
ADVERSARIAL, CANDIDATES, WORKLOADS = HERE / "adversarial", HERE / "candidates", HERE / "workloads"
WORKLOAD = WORKLOADS / "linear_allreduce.py"

#: candidate -> (status, text the result must contain)
CAUGHT = {
    "forges_clock": ("rejected", "own clock disagrees with the judge's"),
    "finds_reference_via_gc": ("incorrect", "elements outside"),
    "switches_on_tf32": ("rejected", "precision flags"),
    "computes_tf32_quietly": ("incorrect", "outside"),
    "computes_bf16": ("incorrect", "outside"),
    "hides_timed_outputs": ("rejected", "did not hand back the outputs"),
    "computes_only_last_call": ("incorrect", "computes only some of the timed calls"),
    "projects_by_shortcut": ("incorrect", "quadratic (signed sum of squares) projection off by"),
}


@pytest.fixture(scope="module")
def unfiltered():
    """Unstaged rounds (the candidate draws its inputs and projects its outputs in its own
    process), which blocks too large to stage still use; the same attacks on staged rounds are in
    test_staged_rounds.py."""
    settings = EvalSettings.for_device("cpu", static_check=False, timing_budget_s=0.2, min_iters=5, load_timeout_s=20.0, trials=3,
                                       staged_blocks=False)
    with Evaluator("cpu", settings) as ev:
        yield ev


def _text(result) -> str:
    return "\n".join([result.summary(), result.error.message if result.error else ""] + [c.message for t in result.trials for c in t.ranks])


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_attack_fails_without_the_static_checker(unfiltered, name):
    status, text = CAUGHT[name]
    result = unfiltered.evaluate(WORKLOAD, ADVERSARIAL / f"{name}.py", world_size=2)
    assert result.status == status, result.summary()
    assert text in _text(result), _text(result)


def test_the_linear_shortcut_passed_the_linear_projection_alone(unfiltered, monkeypatch):
    """``projects_by_shortcut`` against the judge as it was before the quadratic projection (the
    candidate's quadratic numbers taken as the reference's) and before the speedup looked at how
    the calls' time is spread (its zeros take nothing, a block's last call the work: medians alone,
    ``timing_skew_*`` off): every timed call passes and it is credited a speedup of about a
    block's length. The test above: the same candidate, caught (and the spread of its calls
    alone catches it too, at about 9x the reference's skew against the bound of 8)."""
    checked = projection_check.first_mismatch

    def linear_only(got, want, sigmas):
        return checked(dataclasses.replace(got, p2=want.p2), want, sigmas)

    monkeypatch.setattr(projection_check, "first_mismatch", linear_only)
    monkeypatch.setattr(unfiltered.settings, "timing_skew_reject", float("inf"))
    monkeypatch.setattr(unfiltered.settings, "timing_skew_tolerance", float("inf"))
    result = unfiltered.evaluate(WORKLOAD, ADVERSARIAL / "projects_by_shortcut.py", world_size=2)
    assert result.correct, _text(result)
    assert result.timing.speedup > 4, result.summary()


@pytest.mark.xfail(strict=False, reason="an open hole of unstaged rounds (blocks too large to stage, inputs the judge cannot "
                   "send): where the time outside the calls (input draws, projections, flushes, barriers) dwarfs the calls, the "
                   "judge's clock cannot resolve them, and a clock forged in most blocks stays inside the slack (credited ~15x on "
                   "CPU; docs/reliability.md, 'What is still not enforced'); intermittent: on a quiet machine the overheads "
                   "shrink and the clock check sometimes catches it. Staged rounds catch it: test_staged_rounds.py")
def test_a_clock_forged_in_most_blocks_of_small_calls_is_caught(unfiltered):
    """Forged in two blocks of three (each forged block reports a fiftieth of its time): the
    upper median of the rounds' differences is a forged block. On small calls the forged time
    is within the bound the two processes' honest overheads need."""
    result = unfiltered.evaluate(WORKLOAD, ADVERSARIAL / "forges_clock_in_most_blocks.py", world_size=2)
    assert result.status == "rejected" and "own clock disagrees" in _text(result), result.summary()


@pytest.mark.xfail(strict=False, reason="an open hole, intermittent on CI's two cores: one clean run credited the collective-slowing "
                   "candidate 4.96x (reference 2.4 ms against ~0.5 ms) and another doubled the reference's median beside a stopped "
                   "spinner; the patch that stayed in warm candidate ranks is fixed (the next test), how the reference's median "
                   "moves is not found (docs/reliability.md, 'What is still not enforced')")
def test_the_reference_cannot_be_slowed_from_the_candidates_process(unfiltered):
    """Slowing the collectives or spinning the CPU beside the reference: the reference runs in
    other processes, and the candidate's are stopped while it is timed."""
    honest = unfiltered.evaluate(WORKLOAD, CANDIDATES / "correct.py", world_size=2)
    assert honest.correct, honest.summary()
    slowed = unfiltered.evaluate(WORKLOAD, ADVERSARIAL / "slows_reference_collective.py", world_size=2)
    assert slowed.correct, slowed.summary()
    assert slowed.timing.speedup < 2.5, slowed.summary()  # 11.9x on the judge of version 1
    try:
        spun = unfiltered.evaluate(WORKLOAD, ADVERSARIAL / "spins_while_reference_timed.py", world_size=2)
    finally:
        unfiltered.pools[2].kill()  # the spinning children live as long as the pool
    # Its spinning child slows the candidate's own blocks (and may make its clock disagree with the
    # judge's), never the reference's: nothing of it ran while the reference was timed.
    assert "escaped the stop" not in _text(spun), spun.summary()
    assert spun.status in ("correct", "rejected"), spun.summary()
    if spun.timing is not None:
        # The reference's fastest calls (a spinner running beside it would slow every one; the
        # medians doubled in two CI runs, 0.52 -> 1.06 ms, with the fastest calls 0.18 -> 0.22 ms: an open
        # question in docs/reliability.md).
        def fastest(result) -> float:
            return max(s.min_ms for s in result.timing.reference)

        assert fastest(spun) < 2 * max(fastest(honest), fastest(slowed)), (spun.summary(), honest.summary())


def test_what_a_candidate_patches_in_its_process_does_not_reach_the_next_candidate(unfiltered):
    """A candidate judged correct that slows ``dist.all_reduce`` by 20 ms in its process for
    whoever calls it next: the next candidate (honest, calling the collective) runs in fresh
    ranks. In warm ranks the slowdown piled up, 20 ms more per patching candidate."""
    patched = unfiltered.evaluate(WORKLOAD, ADVERSARIAL / "slows_reference_collective.py", world_size=2)
    assert patched.correct, patched.summary()
    honest = unfiltered.evaluate(WORKLOAD, CANDIDATES / "correct.py", world_size=2)
    assert honest.correct, honest.summary()
    assert honest.timing.candidate_ms < 10, honest.summary()


def test_large_outputs_are_judged_whole_in_a_few_rounds_the_candidate_cannot_tell(monkeypatch):
    """Unstaged rounds (staged ones judge every round whole, their outputs already sent):
    outputs past ``whole_check_all_below_bytes`` are handed over and compared whole in
    ``whole_check_rounds`` rounds the judge draws at random (every call still projected); the
    candidate keeps its last outputs in every timed block, so its blocks look the same whether
    they will be judged or not, and one that hides its timed outputs is still caught."""
    settings = EvalSettings.for_device("cpu", static_check=False, timing_budget_s=0.2, min_iters=5, load_timeout_s=20.0, trials=3,
                                       whole_check_all_below_bytes=0, whole_check_rounds=2, staged_blocks=False,
                                       timing_min_block_s=0.0)  # every round, so that some are not judged whole
    handed, candidate_keeps = [], []
    handed_outputs, block = interleaved.Timing._handed_outputs, interleaved.Timing._block

    def counting(self, limit_s):
        handed.append(limit_s)
        return handed_outputs(self, limit_s)

    def recording(self, side, other, iters, *args, **kwargs):
        if side.role == "candidate" and kwargs.get("projection_seed") is not None:  # a round's block, not a warm-up
            candidate_keeps.append(kwargs.get("keep", False))
        return block(self, side, other, iters, *args, **kwargs)

    monkeypatch.setattr(interleaved.Timing, "_handed_outputs", counting)
    monkeypatch.setattr(interleaved.Timing, "_block", recording)
    with Evaluator("cpu", settings) as ev:
        honest = ev.evaluate(WORKLOAD, CANDIDATES / "correct.py", world_size=2)
        assert honest.correct, honest.summary()
        rounds = len(candidate_keeps)
        assert rounds >= 3 and len(handed) == 2 and all(candidate_keeps), (rounds, len(handed), candidate_keeps)
        hiding = ev.evaluate(WORKLOAD, ADVERSARIAL / "hides_timed_outputs.py", world_size=2)
    # Caught by the hand-over in a judged round, or first by the projections where the earliest
    # rounds are not judged whole.
    assert (hiding.status, "did not hand back the outputs" in _text(hiding)) == ("rejected", True) or (
        hiding.status, "computes only some of the timed calls" in _text(hiding)) == ("incorrect", True), _text(hiding)
