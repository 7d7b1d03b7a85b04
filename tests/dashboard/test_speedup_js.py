"""The dashboard's speedup rules (services/api/dashboard/js/speedup.js) agree with kloom's own
(kloom/speedup.py): the same interval and verdict for the same timing record, and only a
measurable win of a kernel other than the reference's own copy is drawn as one."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kloom.evaluation import TimeStats, TimingRecord
from kloom.speedup import measured
from tests import eval_records

JS = Path(__file__).resolve().parents[2] / "services" / "api" / "dashboard" / "js" / "speedup.js"


def _stats(median: float, stdev: float, iters: int) -> TimeStats:
    return eval_records.stats(median, iters, stdev)


def _timing(speedup: float, reference_ms: float, candidate_ms: float, reference=(), candidate=(), **ci) -> TimingRecord:
    return eval_records.timing(speedup, candidate_ms, reference_ms, reference=list(reference), candidate=list(candidate), **ci)


CASES = [
    _timing(2.0, 2.0, 1.0, [_stats(2.0, 0.1, 50)], [_stats(1.0, 0.05, 50)]),
    _timing(1.05, 1.05, 1.0, [_stats(1.05, 0.5, 5)], [_stats(1.0, 0.5, 5)]),
    _timing(0.5, 1.0, 2.0, [_stats(1.0, 0.01, 20), _stats(0.9, 0.01, 20)], [_stats(2.0, 0.02, 20), _stats(1.5, 0.2, 20)]),
    _timing(1.07, 1.07, 1.0, speedup_ci_low=1.05, speedup_ci_high=1.1),
    _timing(1.2, 1.2, 1.0, [_stats(1.2, 0.1, 1)], [_stats(1.0, 0.1, 1)]),
    # Above 1.0 by its own samples, not by more than the noise between evaluations (3% at 1 ms).
    _timing(1.05, 1.05, 1.0, speedup_ci_low=1.01, speedup_ci_high=1.1),
    # The same interval at 0.1 ms a call: a floor of 21%.
    _timing(1.3, 0.13, 0.1, speedup_ci_low=1.2, speedup_ci_high=1.4),
]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_dashboard_reads_speedups_as_kloom_does(tmp_path):
    script = tmp_path / "check.mjs"
    script.write_text(
        f'import {{ measured, isWin }} from "{JS.as_posix()}";\n'
        f"const cases = {json.dumps([dataclasses.asdict(c) for c in CASES])};\n"
        "const out = cases.map((t) => { const m = measured(t); return [m.low, m.high, m.verdict,"
        " isWin({ status: 'correct', strategy: 'torch_compile', verdict: m.verdict }),"
        " isWin({ status: 'correct', strategy: 'reference_copy', verdict: m.verdict })]; });\n"
        "console.log(JSON.stringify(out));\n"
    )
    got = json.loads(subprocess.run(["node", str(script)], capture_output=True, text=True, check=True, timeout=60).stdout)
    for case, (low, high, verdict, win, copy_win) in zip(CASES, got):
        m = measured(case)
        assert verdict == m.verdict and win == m.measurable_win and copy_win is False
        if m.low is None:
            assert low is None and high is None
        else:
            assert low == pytest.approx(m.low) and high == pytest.approx(m.high)
    assert [g[2] for g in got] == ["faster", "no measurable change", "slower", "faster", "unmeasured", "no measurable change", "no measurable change"]


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_dashboards_best_so_far_is_the_step_the_job_calls_its_best(tmp_path):
    """The plot's best-so-far line ends at the job's best step (``agents.records.best_of``): a
    reference that ran slow in one evaluation does not choose the step there either."""
    import random

    from agents.records import Plan, Step, best_of

    rng = random.Random(3)
    jobs = [[(0.610, 0.0947), (0.883, 0.1194), (0.531, 0.1036)]]  # causal_attention_block, one H100
    jobs += [[(rng.uniform(0.4, 0.9), rng.uniform(0.08, 0.2)) for _ in range(rng.randint(1, 6))] for _ in range(60)]
    expected, views = [], []
    for times in jobs:
        steps = []
        for i, (ref, cand) in enumerate(times):
            speedup = ref / cand
            timing = eval_records.timing(speedup, cand, ref, speedup_ci_low=0.95 * speedup, speedup_ci_high=1.05 * speedup)
            steps.append(Step(index=i, plan=Plan(strategy="triton_kernels"), status="correct", evaluation=eval_records.evaluation(timing=timing)))
        assert all(measured(s.timing).measurable_win for s in steps)
        expected.append(best_of(steps).index)
        views.append([{"index": s.index, "status": "correct", "strategy": "triton_kernels", "verdict": "faster", "speedup": s.timing.speedup,
                       "reference_ms": s.timing.reference_ms, "candidate_ms": s.timing.candidate_ms} for s in steps])
    script = tmp_path / "best.mjs"
    script.write_text(f'import {{ bestWin }} from "{JS.as_posix()}";\nconst jobs = {json.dumps(views)};\n'
                      "console.log(JSON.stringify(jobs.map((steps) => bestWin(steps).index)));\n")
    got = json.loads(subprocess.run(["node", str(script)], capture_output=True, text=True, check=True, timeout=60).stdout)
    assert got == expected and got[0] == 0, "the causal block's best is the fastest candidate, not the 7.40x step"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_the_dashboard_widens_verdicts_by_the_jobs_side_bias_as_kloom_does(tmp_path):
    """A job whose reference's own copy read away from 1.0x credits only changes beyond that, on
    the dashboard as in the job's outcome (``agents.records.steps_self_bias``)."""
    from agents.records import Plan, Step, steps_self_bias

    copy = Step(index=0, plan=Plan(strategy="reference_copy"), status="correct",
                evaluation=eval_records.evaluation(timing=eval_records.timing(1 / 1.2, 1.2, 1.0, speedup_ci_low=0.8, speedup_ci_high=0.86)))
    bias = steps_self_bias([copy])
    assert bias == pytest.approx(0.2)
    script = tmp_path / "bias.mjs"
    script.write_text(
        f'import {{ measured, selfBias }} from "{JS.as_posix()}";\n'
        f"const copy = {json.dumps(copy.to_dict())};\n"
        f"const cases = {json.dumps([dataclasses.asdict(c) for c in CASES])};\n"
        "const bias = selfBias([copy, { status: 'failed', plan: { strategy: 'reference_copy' } }]);\n"
        "console.log(JSON.stringify([bias, cases.map((t) => measured(t, bias).verdict)]));\n"
    )
    got_bias, verdicts = json.loads(subprocess.run(["node", str(script)], capture_output=True, text=True, check=True, timeout=60).stdout)
    assert got_bias == pytest.approx(bias)
    assert verdicts == [measured(c, bias).verdict for c in CASES]
    assert verdicts != [measured(c).verdict for c in CASES], "the bias turns some verdict"
