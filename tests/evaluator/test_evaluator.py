"""The evaluator's protocol: correctness on every rank, timing, records, errors and pool reuse."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kloom.cli import app
from services.worker.evaluator import EvalResult, EvalSettings, Evaluator

HERE = Path(__file__).parent
WORKLOADS, CANDIDATES = HERE / "workloads", HERE / "candidates"
LINEAR = WORKLOADS / "linear_allreduce.py"
INPLACE = WORKLOADS / "inplace_allreduce.py"


def test_a_workload_that_makes_its_group_in_get_inputs_gets_it_once_per_process(evaluator):
    """Every trial and timed call draws inputs afresh; the group get_inputs makes is made once
    (the workload raises on a second), else each draw would set up a communicator in the timed call."""
    workload = WORKLOADS / "group_inputs.py"
    result = evaluator.evaluate(workload, CANDIDATES / "group_inputs_candidate.py", world_size=2)
    assert result.status == "correct", result.summary()
    assert result.timing is not None and all(t.iters >= 5 for t in result.timing.candidate)


def test_correct_candidate_is_timed_against_the_reference(evaluator):
    result = evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2)
    assert result.status == "correct", result.summary()
    assert result.compiled and result.correct
    assert len(result.trials) == 6  # 5 before timing, 1 after
    assert all(len(t.ranks) == 2 and t.ok for t in result.trials)
    assert len(set(result.seeds)) == 6
    timing = result.timing
    assert len(timing.reference) == len(timing.candidate) == 2
    assert timing.reference_ms == max(t.median_ms for t in timing.reference)
    assert timing.candidate_ms == max(t.median_ms for t in timing.candidate)
    assert timing.speedup == pytest.approx(timing.reference_ms / timing.candidate_ms)
    assert all(t.iters >= 5 for t in timing.candidate)
    # Interleaved blocks, each side timed with the other stopped; the candidate's clock agreed
    # with the judge's.
    assert timing.interleaved and timing.reference_after is None
    assert [t.iters for t in timing.reference] == [t.iters for t in timing.candidate]
    check = timing.clock_check
    assert check.ok and check.blocks >= 1 and check.candidate_block_ms > 0
    assert result.evaluator_version == "2"
    # Memory: each side's own peak, and one copy of the outputs (64 x 48 float32 per rank).
    assert result.memory.output_bytes == 64 * 48 * 4
    assert 0 < result.memory.reference_peak_bytes and 0 < result.memory.candidate_peak_bytes
    assert result.roofline is not None and result.roofline.floor_ms > 0
    # The record survives JSON.
    again = EvalResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.timing.candidate[1].median_ms == timing.candidate[1].median_ms
    assert again.trials[0].ranks[0].rank == 0


def test_the_reference_pool_is_reused_and_every_candidate_gets_fresh_ranks(evaluator):
    assert evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2).correct  # the workload's reference ranks
    pool = evaluator.pool(2)
    ref_pids = [p.pid for p in pool.reference.procs]
    seen = set()
    for _ in range(2):
        assert evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2).correct
        # The next candidate's ranks were started as this evaluation ended.
        assert pool.candidate.starting or pool.candidate.alive
        cand_pids = tuple(p.pid for p in pool.candidate.procs)
        assert cand_pids and cand_pids not in seen
        seen.add(cand_pids)
    assert [p.pid for p in pool.reference.procs] == ref_pids


def test_candidate_ranks_are_begun_ahead_and_wait_before_the_device():
    """Every candidate runs in fresh ranks; those of the next candidates are begun ahead (one
    more after each candidate, up to the setting), wait unjoined (no process group, no device)
    until the candidate before theirs has joined, and become the next candidate's ranks; closing
    the evaluator ends them all."""
    settings = EvalSettings.for_device("cpu", shapes="ci", timing_budget_s=0.2, min_iters=5, spare_candidate_pools=2)
    with Evaluator("cpu", settings) as ev:
        used: list[tuple[int, ...]] = []
        for n in range(4):
            pools = ev.pools.get(1)
            ahead = [tuple(p.pid for p in s.procs) for s in pools.spares] if pools else []
            assert ev.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=1).correct
            pools = ev.pools[1]
            if n:
                assert used[-1] != tuple(p.pid for p in pools.candidate.procs)
            used.append(tuple(p.pid for p in pools.candidate.procs) if pools.candidate.procs else ())
            assert len(pools.spares) == min(2, n), n
            assert all(s.starting and not s.conns and s.alive and not s.admitted for s in pools.spares)
            # The next candidate's were begun ahead and admitted to join while this one ran.
            assert pools.candidate.admitted == (n >= 2), n
            if ahead:  # the candidate that ran was in the ranks begun first
                assert ahead[0] not in [tuple(p.pid for p in s.procs) for s in pools.spares]
        procs = list(pools.procs)
    assert len(set(used)) == len(used) and all(p.poll() is not None for p in procs)


def test_a_caller_that_says_how_many_candidates_follow_has_their_ranks_begun_ahead_from_the_first():
    """A job says how many steps it may still take (``more_after``): the following candidates'
    ranks (as many as follow, up to ``spare_candidate_pools``) are begun while the first is judged,
    and the next one's admitted when it joins, instead of starting when the first ends (5-6 s a
    candidate on the H100 machines; with one spare ahead, every other candidate waited for its ranks
    on the H200). The admitted ranks are told the reference's outputs, to load the projection's
    kernel for them as they join (on a GPU)."""
    settings = EvalSettings.for_device("cpu", shapes="ci", timing_budget_s=0.2, min_iters=5, spare_candidate_pools=2,
                                       spares_for_announced=2)
    with Evaluator("cpu", settings) as ev:
        assert ev.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=1, more_after=3).correct
        pools = ev.pools[1]
        assert pools.candidate.admitted and len(pools.spares) == 2
        assert pools.candidate.warm_outputs == [(64 * 48 * 4, "torch.float32")]
        second = tuple(p.pid for p in pools.candidate.procs)
        result = ev.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=1, more_after=1)
        assert result.correct and second != tuple(p.pid for p in pools.candidate.procs)
        assert pools.candidate.admitted


def test_spares_kept_off_the_device_during_an_evaluation_are_admitted_as_its_candidate_goes(monkeypatch):
    """``admit_spare_during_evaluation`` off (or, on a GPU, no room for it): while a candidate is
    judged, the next one's ranks stay unjoined (on a GPU: no CUDA context beside the two sides');
    they are admitted as the judged candidate's ranks are killed, and join by the next evaluation."""
    from services.worker.evaluator.judge import JudgePools

    seen: list[bool] = []
    ready = JudgePools.ready_candidate

    def spy(self, outputs=None, admit_spare=True):
        ready(self, outputs, admit_spare)
        seen.append(any(s.admitted for s in self.spares))

    monkeypatch.setattr(JudgePools, "ready_candidate", spy)
    for during in (False, True):
        seen.clear()
        settings = EvalSettings.for_device("cpu", shapes="ci", timing_budget_s=0.2, min_iters=5, spare_candidate_pools=2,
                                           spares_for_announced=2, admit_spare_during_evaluation=during)
        with Evaluator("cpu", settings) as ev:
            for left in (2, 1):
                assert ev.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=1, more_after=left).correct
                assert ev.pools[1].candidate.admitted and ev.pools[1].candidate.alive
        assert seen == [during, during], (during, seen)


def test_a_baseline_told_that_candidates_follow_begins_their_ranks_and_times_the_reference_alone():
    """A job's baseline comes before its first candidate: told how many follow, the evaluator
    begins the first candidate's ranks (and spares) there, importing torch while the reference
    loads and runs, stopped while it is timed, so the first candidate does not wait for them
    (4-6 s of every KernelBench job's first step on the H200). Told none, or where the setting is
    off (the CPU's default: two cores), it begins nothing."""
    assert EvalSettings.for_device("cuda").candidates_begin_at_baseline and not EvalSettings.for_device("cpu").candidates_begin_at_baseline
    settings = EvalSettings.for_device("cpu", shapes="ci", timing_budget_s=0.2, min_iters=5, spare_candidate_pools=2,
                                       spares_for_announced=2, candidates_begin_at_baseline=True)
    with Evaluator("cpu", settings) as ev:
        alone = ev.baseline(LINEAR, world_size=1)
        assert alone.status == "correct" and not ev.pools[1].candidate.starting and not ev.pools[1].spares
    with Evaluator("cpu", dataclasses.replace(settings, candidates_begin_at_baseline=False)) as ev:
        off = ev.baseline(LINEAR, world_size=1, more_after=3)
        assert off.status == "correct" and not ev.pools[1].candidate.starting and not ev.pools[1].spares
    with Evaluator("cpu", settings) as ev:
        told = ev.baseline(LINEAR, world_size=1, more_after=3)
        assert told.status == "correct", told.error
        pools = ev.pools[1]
        begun = tuple(p.pid for p in pools.candidate.procs)
        assert pools.candidate.starting and not pools.candidate.admitted and len(pools.spares) == 2
        assert not any(p.stopped for p in (pools.candidate, *pools.spares)), "left stopped after the reference's timing"
        first = ev.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=1, more_after=2)
        assert first.correct, first.summary()
        assert begun not in [tuple(p.pid for p in pools.candidate.procs)] + [tuple(p.pid for p in s.procs) for s in pools.spares]


def test_candidate_must_mutate_inputs_like_the_reference(evaluator, tmp_path):
    honest = tmp_path / "inplace_ok.py"
    honest.write_text(
        "import torch.distributed as dist\nimport torch.nn as nn\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        dist.all_reduce(x)\n        return x.sum(0)\n"
    )
    assert evaluator.evaluate(INPLACE, honest, world_size=2).correct
    lazy = tmp_path / "inplace_missing.py"
    lazy.write_text(
        "import torch\nimport torch.distributed as dist\nimport torch.nn as nn\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        y = x.clone()\n        dist.all_reduce(y)\n        return y.sum(0)\n"
    )
    result = evaluator.evaluate(INPLACE, lazy, world_size=2)
    assert result.status == "incorrect"
    assert "input 0 after the call" in result.summary()


def test_tolerance_is_dtype_aware_and_strict(evaluator, tmp_path):
    off = tmp_path / "slightly_off.py"
    off.write_text(
        (CANDIDATES / "correct.py").read_text().replace("return y", "return y * (1 + 5e-3)")
    )
    result = evaluator.evaluate(LINEAR, off, world_size=2)
    assert result.status == "incorrect"
    assert "rtol=0.0001" in result.summary()


@pytest.mark.parametrize(
    "source, status, text",
    [
        ("def broken(:\n", "compile_error", "syntax error"),
        ("import torch\n", "compile_error", "no ModelNew"),
        ("import torch.nn as nn\nimport missing_module_xyz\nclass ModelNew(nn.Module):\n    pass\n", "rejected", "missing_module_xyz"),
        (
            "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self, a, b):\n        super().__init__()\n        raise ValueError('bad init')\n",
            "compile_error",
            "bad init",
        ),
        (
            "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        raise RuntimeError('boom in forward')\n",
            "compile_error",
            "takes 1 positional argument",
        ),
    ],
)
def test_broken_candidates_get_a_clear_status(evaluator, tmp_path, source, status, text):
    path = tmp_path / "broken.py"
    path.write_text(source)
    result = evaluator.evaluate(LINEAR, path, world_size=2)
    assert result.status == status, result.summary()
    assert text in (result.error.message + result.error.traceback), result.error.message


def test_runtime_error_names_the_rank(evaluator, tmp_path):
    path = tmp_path / "raises.py"
    path.write_text(
        "import torch.distributed as dist\nimport torch.nn as nn\n\n"
        "class ModelNew(nn.Module):\n    def __init__(self, a, b):\n        super().__init__()\n"
        "    def forward(self, x):\n        if dist.get_rank() == 1:\n            raise RuntimeError('rank one fails')\n"
        "        return x\n"
    )
    result = evaluator.evaluate(LINEAR, path, world_size=2)
    assert result.status == "runtime_error"
    assert result.error.rank == 1 and "rank one fails" in result.error.message
    assert evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2).correct


def test_malformed_workloads_are_workload_errors(evaluator, tmp_path):
    bad = tmp_path / "no_model.py"
    bad.write_text("def get_inputs():\n    return []\n\ndef get_init_inputs():\n    return []\n")
    result = evaluator.evaluate(bad, CANDIDATES / "correct.py", world_size=2)
    assert result.status == "workload_error"
    assert str(bad) in result.error.message and "no class Model" in result.error.message
    unsupported = evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=3)
    assert unsupported.status == "workload_error" and "world size 3 is not supported" in unsupported.error.message
    crashing = tmp_path / "crashing_reference.py"
    crashing.write_text(
        "import torch\nimport torch.nn as nn\nWORLD_SIZES = [2]\n\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        raise RuntimeError('reference is broken')\n\n"
        "def get_init_inputs():\n    return []\n\ndef get_inputs():\n    return [torch.randn(4)]\n"
    )
    result = evaluator.evaluate(crashing, CANDIDATES / "correct.py", world_size=2)
    assert result.status == "workload_error" and "reference is broken" in result.error.message


def test_baseline_times_the_reference_alone(evaluator):
    result = evaluator.baseline(LINEAR, world_size=2)
    assert result.status == "correct"
    assert len(result.times) == 2 and result.reference_ms > 0
    assert result.roofline.reference_fraction is not None


def test_a_baseline_ends_by_its_deadline(evaluator):
    """A reference slow enough that its timing takes a while (0.4 s a call): given a deadline
    (a job's wall-time limit), the baseline ends by it as a timeout that says so."""
    started = time.monotonic()
    result = evaluator.baseline(HERE / "workloads" / "slow_reference.py", world_size=2, deadline_s=3.0)
    took = time.monotonic() - started
    assert result.status == "timeout" and "deadline of 3 s ran out" in result.error.message, result.error
    assert took < 3.0 + 10.0, f"took {took:.1f} s against a 3 s deadline"


def test_cli_eval_exit_code_and_json(tmp_path):
    runner = CliRunner()
    ok = runner.invoke(app, ["eval", str(LINEAR), str(CANDIDATES / "correct.py"), "-n", "2", "--json"])
    assert ok.exit_code == 0, ok.output
    record = json.loads(ok.output)
    assert record["status"] == "correct" and record["timing"]["speedup"] > 0
    bad = runner.invoke(app, ["eval", str(LINEAR), str(HERE / "adversarial" / "returns_zeros.py"), "-n", "2"])
    assert bad.exit_code == 1
    assert "incorrect" in bad.output


@pytest.fixture(scope="module")
def unfiltered_evaluator():
    """The static checker switched off: the judge alone stands between a candidate and a verdict."""
    from services.worker.evaluator import EvalSettings, Evaluator

    settings = EvalSettings.for_device("cpu", static_check=False, timing_budget_s=0.1, min_iters=3, load_timeout_s=20.0)
    with Evaluator("cpu", settings) as ev:
        yield ev


def test_unfiltered_judge_accepts_honest_candidates(unfiltered_evaluator):
    good = unfiltered_evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2)
    assert good.correct, good.summary()
    assert good.trials[0].ranks[0].numel == 64 * 48
    inplace_ok = unfiltered_evaluator.evaluate(INPLACE, candidate_source=(
        "import torch.distributed as dist\nimport torch.nn as nn\n\n"
        "class ModelNew(nn.Module):\n    def forward(self, x):\n        dist.all_reduce(x)\n        return x.sum(0)\n"
    ), world_size=2)
    assert inplace_ok.correct, inplace_ok.summary()


@pytest.mark.parametrize("name", ["returns_zeros", "allocator_reuse", "mutates_input", "caches_results", "rank0_only", "returns_nan"])
def test_unfiltered_judge_catches_the_same_cheats(unfiltered_evaluator, name):
    """Cheats the outputs give away are caught with the static checker off too."""
    bad = unfiltered_evaluator.evaluate(LINEAR, HERE / "adversarial" / f"{name}.py", world_size=2)
    assert bad.status == "incorrect", bad.summary()


def test_a_deadline_bounds_the_whole_evaluation(evaluator):
    """A job's wall-time limit reaches into the evaluation: a candidate that spins in its first
    call (which alone may take the load limit, a minute here) is stopped when the deadline runs
    out, says so, and the rebuilt pool then judges an honest candidate within a generous one."""
    import time

    started = time.monotonic()
    result = evaluator.evaluate(LINEAR, HERE / "adversarial" / "spins_forever.py", world_size=2, deadline_s=4.0)
    took = time.monotonic() - started
    assert result.status == "timeout", result.summary()
    assert "deadline of 4 s ran out" in result.error.message
    assert took < 4.0 + 15.0  # the deadline, plus killing the pool
    honest = evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2, deadline_s=300.0)
    assert honest.correct, honest.summary()


def test_a_spent_deadline_stops_before_asking_the_ranks(evaluator):
    result = evaluator.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2, deadline_s=0.0)
    assert result.status == "timeout" and "deadline" in result.error.message


def test_large_trial_inputs_are_drawn_by_the_candidates_ranks_and_checked(monkeypatch, tmp_path):
    """Inputs of ``send_inputs_below_bytes`` or more stay where they were drawn: the candidate's
    ranks draw them from the trial's seed (as timed blocks do) and check them against the
    reference's fingerprints, so honest candidates pass and cheats are still caught on them. A
    workload whose draws are not reproducible is a ``workload_error`` that says so (before, it
    went through trials on sent inputs and failed in timing, where both sides draw, as an
    ``incorrect`` candidate), whether its inputs are sent or not."""
    from services.worker.evaluator.pool import RankPool

    sent: list = []
    request = RankPool.request

    def spy(self, op, args=None, **kwargs):
        if op == "trial":
            sent.extend(per["inputs"] for per in (kwargs.get("per_rank") or {}).values())
        return request(self, op, args, **kwargs)

    monkeypatch.setattr(RankPool, "request", spy)
    settings = EvalSettings.for_device("cpu", shapes="ci", timing_budget_s=0.1, min_iters=3, send_inputs_below_bytes=0)
    irreproducible = tmp_path / "irreproducible.py"
    irreproducible.write_text(LINEAR.read_text().replace(
        "return [torch.randn(64, 32)]",
        "return [torch.randn(64, 32, generator=torch.Generator().manual_seed(int.from_bytes(__import__('os').urandom(4), 'little')))]"))
    with Evaluator("cpu", settings) as ev:
        good = ev.evaluate(LINEAR, CANDIDATES / "correct.py", world_size=2)
        assert good.correct, good.summary()
        assert sent and all(inputs is None for inputs in sent)
        assert ev.evaluate(LINEAR, HERE / "adversarial" / "returns_zeros.py", world_size=2).status == "incorrect"
        bad = ev.evaluate(irreproducible, CANDIDATES / "correct.py", world_size=2)
    assert bad.status == "workload_error" and "not reproducible" in bad.error.message, bad.summary()
    with Evaluator("cpu", EvalSettings.for_device("cpu", shapes="ci", timing_budget_s=0.1, min_iters=3)) as ev:
        bad = ev.evaluate(irreproducible, CANDIDATES / "correct.py", world_size=2)
    assert bad.status == "workload_error" and "not reproducible" in bad.error.message, bad.summary()
