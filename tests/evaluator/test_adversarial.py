"""Every cheating or broken candidate in ``adversarial/`` is caught, and each test says how."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
ADVERSARIAL, CANDIDATES, WORKLOADS = HERE / "adversarial", HERE / "candidates", HERE / "workloads"
WORKLOAD = WORKLOADS / "linear_allreduce.py"

#: candidate -> (statuses that count as caught, text the result must contain, how it is caught)
CAUGHT = {
    "returns_zeros": ({"incorrect"}, "elements outside", "outputs compared with the reference's"),
    "returns_inputs": ({"incorrect"}, "shape", "output shape differs"),
    # Freed blocks are poisoned with NaN before each call and the reference ran long before, so
    # the candidate gets NaN (CUDA's caching allocator) or other garbage (the CPU's malloc).
    "allocator_reuse": ({"incorrect"}, "elements outside", "freed blocks poisoned with NaN before the call"),
    "rank0_only": ({"incorrect"}, "rank 1", "every rank's outputs compared"),
    "caches_results": ({"incorrect"}, "elements outside", "fresh random inputs every trial"),
    "caches_after_warmup": ({"incorrect"}, "timed call's outputs were wrong", "timed calls on fresh inputs, each round's last judged"),
    # The allocator may hand a later trial the same address: caught there, or else in timing.
    "caches_by_storage": ({"incorrect"}, ("elements outside", "did not match the reference"),
                          "trials, every timed call's projections and each timing round's last call judged on fresh inputs"),
    "patches_timer": ({"rejected"}, "patches a library", "static checker"),
    "deadlock": ({"timeout"}, "did not finish", "per-call time limit, pool killed"),
    "spins_forever": ({"timeout"}, "did not finish", "per-call time limit, pool killed"),
    "segfaults": ({"crashed", "runtime_error"}, "rank", "rank death or illegal access detected, pool rebuilt"),
    "mutates_input": ({"incorrect"}, "modified input", "inputs fingerprinted before and after"),
    "out_of_band": ({"rejected"}, "outside the collectives", "static checker"),
    "calls_reference": ({"rejected"}, "linear_allreduce", "static checker"),
    "swallows_errors": ({"rejected"}, "swallows", "static checker"),
    "returns_nan": ({"incorrect"}, "NaN", "NaN never passes"),
    "starves_reference": ({"rejected"}, "num_threads", "process-wide settings (thread count) snapshot"),
}


def _message(result) -> str:
    parts = [result.summary()]
    if result.error:
        parts.append(result.error.message)
    parts += [c.message for t in result.trials for c in t.ranks]
    parts += result.flags
    return "\n".join(parts)


@pytest.mark.parametrize("name", sorted(CAUGHT))
def test_adversarial_candidate_is_caught(evaluator, name):
    statuses, text, how = CAUGHT[name]
    result = evaluator.evaluate(WORKLOAD, ADVERSARIAL / f"{name}.py", world_size=2)
    assert result.status in statuses, f"{name} should be caught by {how}, got: {result.summary()}"
    assert not result.correct
    texts = (text,) if isinstance(text, str) else text  # where more than one of the judge's checks can catch it
    assert any(t in _message(result) for t in texts), f"{name}: expected one of {texts!r} in:\n{_message(result)}"
    # The pool is usable afterwards: an honest candidate evaluates correctly next.
    after = evaluator.evaluate(WORKLOAD, CANDIDATES / "correct.py", world_size=2)
    assert after.correct, after.summary()


def test_hardcoded_outputs_for_a_known_seed_fail(evaluator, tmp_path):
    """Outputs computed for the inputs of one seed pass only if the evaluator reused that seed."""
    ios = evaluator.reference_io(WORKLOAD, world_size=2, seed=1234)
    expected = {rank: io["outputs"][0].tolist() for rank, io in enumerate(ios)}
    source = (ADVERSARIAL / "hardcodes_seed.py").read_text().replace("EXPECTED = {}", f"EXPECTED = {expected!r}")
    candidate = tmp_path / "hardcodes_seed.py"
    candidate.write_text(source)
    result = evaluator.evaluate(WORKLOAD, candidate, world_size=2)
    assert result.status == "incorrect", result.summary()
    assert len(set(result.seeds)) == len(result.seeds) and 1234 not in result.seeds


@pytest.mark.gpu
def test_side_stream_work_is_caught(evaluator):
    if evaluator.device != "cuda":
        pytest.skip("side streams exist on CUDA only")
    result = evaluator.evaluate(WORKLOAD, ADVERSARIAL / "side_stream_unsynced.py", world_size=2)
    assert result.status == "incorrect", result.summary()
    assert "changed after the call returned" in _message(result)


def test_a_cache_keyed_on_the_inputs_values_is_not_credited(evaluator):
    """Honest on every trial's new inputs, the stored result when the same values come again:
    12.5x credited on the CPU when the timing loop called with one input over and over. Every
    timed call now runs on inputs drawn afresh, so the cache never answers: the candidate is
    correct and as slow as what it computes."""
    result = evaluator.evaluate(WORKLOAD, ADVERSARIAL / "caches_by_fingerprint.py", world_size=2)
    assert result.status in ("correct", "incorrect"), result.summary()
    assert not (result.correct and result.timing is not None and result.timing.speedup > 1.5), result.summary()
