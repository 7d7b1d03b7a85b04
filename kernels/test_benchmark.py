"""The benchmark's verdicts: a kind wins only when every case of it was correct and did not crash
and inductor's time over the kernel's has a geometric mean of at least 1; cases cut by the
budget do not count; every kind the templates name is benchmarked."""

import json

from agents.strategist.triton_kernels.plan import find_matches  # noqa: F401  (registers every template)
from agents.strategist.triton_kernels.templates import TEMPLATES
from kernels.bench_all import FAMILIES
from kernels.conv import bench_conv
from kernels.gemm import bench_gemm
from kernels.pool import bench_pool
from kernels.benchmark import markdown, wins_table


def _row(kind, ratio, correct=True):
    return {"kind": kind, "name": kind, "correct": correct, "error": 0.0, "eager_ms": 2.0, "inductor_ms": ratio, "kernel_ms": 1.0, "vs_eager": 2.0, "vs_inductor": ratio}


def test_wins_need_every_case_correct_and_a_geomean_of_at_least_one():
    rows = [
        _row("a", 1.5), _row("a", 0.8),  # geomean 1.095: wins
        _row("b", 1.5), _row("b", 2.0, correct=False),
        _row("c", 1.2), {"kind": "c", "name": "x", "failure": "RuntimeError: out of resources"},
        _row("d", 0.9),
        _row("e", 1.1), {"kind": "e", "name": "y", "failure": "skipped: out of time"},
    ]  # fmt: skip
    kinds = wins_table(rows, "GPU", "cmd")["kinds"]
    assert {k: v["wins"] for k, v in kinds.items()} == {"a": True, "b": False, "c": False, "d": False, "e": True}
    assert kinds["a"]["cases"] == 2 and abs(kinds["a"]["vs_inductor"] - 1.0954) < 1e-3
    table = markdown(rows, "GPU", "cmd")
    assert "| a | a | yes" in table and "failed: RuntimeError" in table


def test_every_template_kind_has_a_benchmark():
    benchmarked = {case.kind for family in FAMILIES.values() for case in family.cases()}
    benchmarked |= bench_gemm.KINDS | bench_conv.KINDS | bench_pool.KINDS  # their own benchmarks: kernels/gemm, kernels/conv, kernels/pool
    assert {t.kind for t in TEMPLATES.values()} <= benchmarked


def test_a_family_benchmark_keeps_every_pattern_it_measured_and_says_why_the_others_are_missing(tmp_path):
    """``run_patterns``: a pattern that raises is a row with its error, the others still run, none
    starts after the budget, and the table is rewritten after every pattern."""
    from kernels.benchmark import pattern_table, run_patterns

    def measure(name, eager, kloom, tol):
        if name == "bad":
            raise RuntimeError("out of resources")
        return {"pattern": name, "eager_ms": eager(), "kloom_ms": kloom(), "kloom_error": 0.5, "default_ms": 2.0, "default_error": 3.0}

    found = [("good", lambda: 2.0, lambda: 1.0, (1e-4, 1e-4)), ("bad", None, None, None), ("late", lambda: 1.0, lambda: 1.0, None)]
    ticks = iter([0.0, 0.0, 0.0, 99.0])  # the start, then before each pattern: the third starts past the budget
    table = lambda rows: pattern_table(rows, "X vs inductor", "cmd", [("compile default", "default_ms")], "GPU")  # noqa: E731
    rows = run_patterns(found, measure, tmp_path, "bench_x", table, 10.0, clock=lambda: next(ticks))
    assert [r.get("error", "") for r in rows] == ["", "RuntimeError: out of resources", "TimeoutError: not started: over the time budget"]
    assert [r["pattern"] for r in json.loads((tmp_path / "bench_x.json").read_text())] == ["good", "bad", "late"]
    table = (tmp_path / "bench_x.md").read_text()
    assert "| good | 2.000 | 2.00x (0.5) | 1.00x **wrong** |" in table and "| bad | error: RuntimeError: out of resources |" in table
