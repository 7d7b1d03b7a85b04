"""Which step a job calls its best (``agents.records.best_of``): each step's speedup divides its own
reference time, measured beside the candidate in one evaluation; where the reference swings between
evaluations more than the candidates do (a launch-bound reference on a GPU), the largest ratio
would choose the step whose reference ran slowest. Steps are ranked by the lower of their own
speedup and the job's pooled reference over their candidate's own time; what is reported for the
chosen step is still its own measurement. The verifier's "new best", the dashboard's best-so-far
line (tests/dashboard/test_speedup_js.py) and the job's best follow the one rule."""

from __future__ import annotations

import random

import pytest

from agents.limits import Budget
from agents.records import JobSpec, Plan, Step, Trajectory, best_of, pooled_reference_ms, ranking_speedup
from agents.roles import PlanningContext
from agents.verifier import beats_best, feedback
from kloom.speedup import REFERENCE_COPY
from tests import eval_records


def _step(index: int, strategy: str, reference_ms: float | None, candidate_ms: float | None, status: str = "correct") -> Step:
    timing = None if reference_ms is None else eval_records.timing(reference_ms / candidate_ms, candidate_ms, reference_ms)
    evaluation = eval_records.evaluation(status, timing=timing) if status == "correct" else eval_records.evaluation(status)
    return Step(index=index, plan=Plan(strategy=strategy), status=status, evaluation=evaluation)


#: causal_attention_block on one H100 (results/gpu/h100-session40): the reference read 0.883 ms in
#: the step that measured 7.40x, 0.53-0.61 ms in the others.
CAUSAL = [(REFERENCE_COPY, 0.531, 0.530), ("kernels_graph", 0.610, 0.0947), ("compile_cuda_graph", 0.883, 0.1194),
          ("kernels_compiled_graph", 0.531, 0.1036), ("cuda_graph", 0.58, 0.1426)]


def _job(rows) -> Trajectory:
    traj = Trajectory(job=JobSpec(workload="w.py", world_size=1), workload_name="w", state="succeeded")
    traj.steps = [_step(i, *row) for i, row in enumerate(rows)]
    return traj


def test_a_reference_that_ran_slow_in_one_evaluation_does_not_choose_the_step():
    traj = _job(CAUSAL)
    slow_reference = traj.steps[2]
    assert max(traj.steps, key=lambda s: s.reported_speedup).index == 2, "by the largest ratio, the 7.40x step"
    best = traj.best_step
    assert best.plan.strategy == "kernels_graph", "the fastest candidate by its own time"
    # What is reported is the chosen step's own measurement, the two times it divides.
    assert traj.best_speedup == pytest.approx(0.610 / 0.0947) == best.timing.speedup
    pooled = pooled_reference_ms(traj.steps)
    assert pooled == pytest.approx(0.58)
    assert ranking_speedup(slow_reference, pooled) == pytest.approx(0.58 / 0.1194)
    assert ranking_speedup(slow_reference, pooled) < slow_reference.reported_speedup


def test_where_the_references_agree_the_largest_ratio_is_the_best():
    rng = random.Random(5)
    for _ in range(50):
        cands = [rng.uniform(0.2, 2.0) for _ in range(rng.randint(2, 6))]
        traj = _job([("torch_compile", 2.0, c) for c in cands])
        assert traj.best_step.index == min(range(len(cands)), key=lambda i: (cands[i], i))


def test_a_step_is_never_ranked_above_its_own_speedup_and_the_copy_never_above_one():
    rng = random.Random(7)
    for _ in range(50):
        rows = [(rng.choice(["torch_compile", REFERENCE_COPY, "cuda_graph"]), rng.uniform(0.5, 2.0), rng.uniform(0.2, 2.0)) for _ in range(rng.randint(1, 6))]
        traj = _job(rows)
        pooled = pooled_reference_ms(traj.steps)
        for step in traj.steps:
            assert ranking_speedup(step, pooled) <= step.reported_speedup
            if step.plan.strategy == REFERENCE_COPY:
                assert ranking_speedup(step, pooled) <= 1.0
        # The reported number is always the chosen step's own.
        assert traj.best_speedup == traj.best_step.reported_speedup


def test_steps_without_a_time_or_a_second_timed_step_rank_by_their_own_speedup():
    one = _job([("torch_compile", 3.0, 1.0)])
    assert pooled_reference_ms(one.steps) is None and ranking_speedup(one.steps[0], None) == 3.0
    assert one.best_step.index == 0
    mixed = _job([("torch_compile", 3.0, 1.0), ("cuda_graph", None, None, "incorrect"), ("cuda_graph", None, None, "failed")])
    assert pooled_reference_ms(mixed.steps) is None and mixed.best_step.index == 0
    assert best_of([]) is None and _job([("x", None, None, "incorrect")]).best_step is None


def test_the_verifiers_new_best_follows_the_jobs_rule():
    history = _job(CAUSAL[:2]).steps  # the reference's copy, then kernels_graph at 6.44x
    spec = JobSpec(workload="w.py", world_size=1)
    ctx = PlanningContext(spec=spec, workload_source="", workload_name="w", analysis=None, baseline=None, history=history, budget=Budget(spec.limits))
    slow_ref = _step(2, *CAUSAL[2]).evaluation
    assert slow_ref.timing.speedup > history[1].reported_speedup
    assert not beats_best(slow_ref, Plan(strategy="compile_cuda_graph"), ctx)
    assert "not better than step 1" in feedback(slow_ref, Plan(strategy="compile_cuda_graph"), None, ctx)
    faster = _step(2, "triton_kernels", 0.60, 0.08).evaluation
    assert beats_best(faster, Plan(strategy="triton_kernels"), ctx)
    assert "new best" in feedback(faster, Plan(strategy="triton_kernels"), None, ctx)
    assert not beats_best(eval_records.evaluation("incorrect"), Plan(strategy="triton_kernels"), ctx)
    # Whatever the verifier calls a new best is the job's best once the step is recorded.
    rng = random.Random(11)
    for _ in range(50):
        ctx.history = _job([("torch_compile", rng.uniform(0.4, 0.9), rng.uniform(0.08, 0.2)) for _ in range(rng.randint(1, 4))]).steps
        step = _step(len(ctx.history), "triton_kernels", rng.uniform(0.4, 0.9), rng.uniform(0.08, 0.2))
        assert beats_best(step.evaluation, step.plan, ctx) == (best_of([*ctx.history, step]) is step)


def test_a_measurable_win_is_the_best_before_a_larger_ratio_inside_the_noise():
    def step(index, strategy, speedup, low, high):
        timing = eval_records.timing(speedup, 1.0, speedup, speedup_ci_low=low, speedup_ci_high=high)
        return Step(index=index, plan=Plan(strategy=strategy), status="correct", evaluation=eval_records.evaluation(timing=timing))

    noisy, win = step(0, "cuda_graph", 1.3, 0.8, 1.9), step(1, "torch_compile", 1.2, 1.15, 1.25)
    traj = Trajectory(job=JobSpec(workload="w.py", world_size=1), workload_name="w", state="succeeded", steps=[noisy, win])
    assert traj.best_step is win and traj.outcome == "faster kernel found" and traj.result_speedup == pytest.approx(1.2)
    # Without the win, the larger ratio is the best, and the reference stands.
    alone = Trajectory(job=JobSpec(workload="w.py", world_size=1), workload_name="w", state="succeeded", steps=[noisy])
    assert alone.best_step is noisy and alone.outcome == "no faster kernel found" and alone.result_speedup == 1.0
    # The reference's copy is never the win, however it reads; a copy that read 1.3x widens every verdict.
    copy = step(2, REFERENCE_COPY, 1.3, 1.25, 1.35)
    biased = Trajectory(job=JobSpec(workload="w.py", world_size=1), workload_name="w", state="succeeded", steps=[noisy, win, copy])
    assert biased.self_bias == pytest.approx(0.3) and biased.outcome == "no faster kernel found"
