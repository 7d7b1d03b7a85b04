"""benchmarks/step_ranking.py: where a launch-bound reference ran slowest in one step, the largest
of the steps' own ratios and kloom's choice part ways, and the table says by how much kloom's
candidate is faster by its own time."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.kb.kb_trajectories import Tried, Workload, trajectory

ROOT = Path(__file__).resolve().parents[2]


def _ranking():
    spec = importlib.util.spec_from_file_location("step_ranking", ROOT / "benchmarks" / "step_ranking.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(traj, times: list[tuple[float, float]]):
    """The steps' reference and candidate times set to ``times``, each speedup their ratio."""
    for step, (ref, cand) in zip(traj.steps, times):
        t = step.evaluation.timing
        t.reference_ms, t.candidate_ms, t.speedup = ref, cand, ref / cand
    return traj


def test_kloom_chooses_the_faster_candidate_where_the_reference_swung(tmp_path):
    ranking = _ranking()
    # The causal attention block of the fortieth session's H100 run: a 0.883 ms reference in the
    # step that read 7.40x, 0.53-0.61 ms in the others.
    swung = _timed(trajectory("job-s", Workload(), [Tried("kernels_graph", speedup=1.0), Tried("compile_cuda_graph", speedup=1.0),
                                                    Tried("kernels_compiled_graph", speedup=1.0)], device="cuda"),
                   [(0.610, 0.0947), (0.883, 0.1194), (0.531, 0.1036)])
    steady = _timed(trajectory("job-t", Workload(name="steady"), [Tried("a", speedup=1.0), Tried("b", speedup=1.0)], device="cuda"),
                    [(5.0, 2.0), (5.1, 2.2)])
    r = ranking.row("x", swung)
    assert (r["chosen"], r["pooled"], r["kloom"]) == (1, 0, 0), "the ratio picks the slow-reference step; kloom the faster candidate"
    assert abs(r["own_time_gain"] - 0.1194 / 0.0947) < 1e-9 and abs(r["ref_spread"] - (0.883 - 0.531) / 0.531) < 1e-9
    s = ranking.row("y", steady)
    assert s["chosen"] == s["pooled"] == s["kloom"] == 0
    for name, traj in (("swung", swung), ("steady", steady)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "trajectory.json").write_text(json.dumps(traj.to_dict()))
    found = {where.split("/")[-2] for where, _ in ranking.trajectories([tmp_path])}
    assert found == {"swung", "steady"}
