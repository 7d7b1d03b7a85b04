"""A job's records hold typed records (issue 23): a step's evaluation is an ``EvalResult``, its
profile a ``Profile``, the trajectory's baseline a ``BaselineResult`` and its analysis an
``Analysis``. They become JSON only where a trajectory or a step is saved, in the format stored
before they were typed, and every stored trajectory loads, those of older versions of the records
included."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from agents.analysis import Analysis
from agents.limits import Budget
from agents.llm.views import planner_view
from agents.records import Step, Trajectory
from agents.roles import PlanningContext
from agents.sinks import FileSink
from agents.strategist.offline import OfflinePlanner
from kb.admission import evaluator_version
from kloom.evaluation import BaselineResult, EvalResult
from kloom.opgraph import OpGraph
from kloom.profile import KernelStat, Profile, RankTimeline

ROOT = Path(__file__).resolve().parents[2]
#: A job's trajectory.json as FileSink wrote it before the records were typed (a real CPU job:
#: the reference's copy, a wrong and a crashing candidate evaluated, a step with no candidate).
BEFORE = Path(__file__).parent / "fixtures" / "trajectory_saved_before_typed_records.json"
#: A profile as the profiler returned it and a step stored it before the records were typed (a
#: real one: Nsight Compute and the timeline on two H200s, from ``results/profiles``).
PROFILE_BEFORE = Path(__file__).parent / "fixtures" / "profile_saved_before_typed_records.json"
#: The committed batches' trajectories (results/), written by older versions of the records.
ARCHIVES = sorted((ROOT / "results").glob("**/trajectories.jsonl.xz"))
#: Fields the records gained after those were written, with the default they read back as.
GAINED = {
    "evaluation": {"memory": None, "evaluator_version": "1", "tuned": []},
    "timing": {"reference_alone": None, "interleaved": False, "speedup_ci_low": None, "speedup_ci_high": None, "clock_check": None,
               "statistic": "median"},
    "clock_check": {"excess_ms": None, "staged": None},
    "memory": {"peaks_by_command": {}},
    "analysis": {"trace_error": "", "source_rewrites": {}, "collective_calls": {}, "bincount_bins": None, "op_graph": None, "floor_from": ""},
}


def test_a_trajectory_saved_before_the_records_were_typed_reads_typed_and_saves_byte_for_byte(tmp_path):
    text = BEFORE.read_text()
    (tmp_path / "trajectory.json").write_text(text)
    sink = FileSink(tmp_path)
    traj = sink.load()
    assert isinstance(traj.baseline, BaselineResult) and traj.baseline.roofline is not None and traj.baseline.reference_ms > 0
    correct, wrong, crashed, unwritten = traj.steps
    assert all(isinstance(s.evaluation, EvalResult) for s in (correct, wrong, crashed)) and unwritten.evaluation is None
    timing = correct.evaluation.timing
    assert correct.speedup == timing.speedup and correct.candidate_ms == timing.candidate_ms
    assert timing.interleaved and timing.clock_check is not None and correct.evaluation.memory is not None
    assert correct.evaluation.evaluator_version == evaluator_version(correct.evaluation) == "2"
    assert wrong.status == "incorrect" and any(not c.ok for t in wrong.evaluation.trials for c in t.ranks)
    assert crashed.evaluation.error.message.startswith("RuntimeError: the candidate failed on purpose")
    assert traj.best_step is correct and traj.outcome in ("faster kernel found", "no faster kernel found")
    assert isinstance(traj.analysis, Analysis) and isinstance(traj.analysis.op_graph, OpGraph)
    assert traj.analysis.collectives == ["allreduce"] and traj.analysis.row_split["rows"] == 4

    sink.save(traj, None)
    saved = (tmp_path / "trajectory.json").read_text()
    # Byte for byte, but for the fields the records gained since the fixture was written.
    assert json.dumps(_without_gained(json.loads(saved), json.loads(text))) == json.dumps(json.loads(text))
    # A step alone, as the service stores it (one row per step) and its API returns it.
    for stored, step in zip(json.loads(text)["steps"], traj.steps):
        assert json.dumps(_without_gained(step.to_dict(), stored)) == json.dumps(stored)
        assert Step.from_dict(stored) == step


def test_a_step_profile_and_the_analysis_saved_before_they_were_typed_read_typed_and_save_byte_for_byte(tmp_path):
    """The old format: the trajectory's ``analysis`` an ``Analysis.to_dict()``, a step's
    ``profile`` a ``Profile.to_dict()``. Both read as records that the planner and the prompts use
    as they are, and the trajectory saves as it was stored."""
    stored = json.loads(BEFORE.read_text())
    stored["steps"][0]["profile"] = json.loads(PROFILE_BEFORE.read_text())
    text = json.dumps(stored, indent=1)
    (tmp_path / "trajectory.json").write_text(text)
    sink = FileSink(tmp_path)
    traj = sink.load()

    profile = traj.steps[0].profile
    assert isinstance(profile, Profile) and profile.tool == "ncu" and profile.status == "ok"
    assert all(isinstance(k, KernelStat) for k in profile.kernels) and profile.kernels[0].bottleneck
    assert all(isinstance(t, RankTimeline) for t in profile.timelines) and [t.rank for t in profile.timelines] == [0, 1]
    assert 0 < profile.timelines[0].communication_share <= 1 and profile.top(1, communication=True)[0].communication
    assert all(s.profile is None for s in traj.steps[1:])

    # In the process, the records go on as they are: the planner plans from the analysis itself.
    ctx = PlanningContext(
        spec=traj.job, workload_source="", workload_name=traj.workload_name, analysis=traj.analysis, baseline=traj.baseline,
        history=traj.steps, budget=Budget(traj.job.limits),
    )  # fmt: skip
    assert OfflinePlanner().fallback(ctx).strategy == "reference_copy"
    view = planner_view(ctx)
    assert view["best"]["profile"].startswith("triton_red_fused") and '- collectives: ["allreduce"]' in view["analysis"]["details"]

    sink.save(traj, None)
    saved = json.loads((tmp_path / "trajectory.json").read_text())
    assert json.dumps(_without_gained(saved, stored), indent=1) == text  # but for the evaluations' gained fields
    assert saved["steps"][0]["profile"] == stored["steps"][0]["profile"]
    assert _without_gained(saved["analysis"], stored["analysis"]) == stored["analysis"]
    assert json.dumps(_without_gained(traj.steps[0].to_dict(), stored["steps"][0])) == json.dumps(stored["steps"][0])
    assert Trajectory.from_dict(saved) == traj


def _without_gained(saved, stored):
    """``saved`` less the fields (anywhere in it) that ``stored`` lacked, each checked to be one
    the records gained since (at its default)."""
    if isinstance(saved, dict) and isinstance(stored, dict):
        out = {}
        for key, value in saved.items():
            if key not in stored:
                assert any(key in g and value == g[key] for g in GAINED.values()), (key, value)
                continue
            out[key] = _without_gained(value, stored[key])
        return out
    if isinstance(saved, list) and isinstance(stored, list):
        return [_without_gained(a, b) for a, b in zip(saved, stored)]
    return saved


def _added(saved: dict, stored: dict, where: str) -> dict:
    """``saved`` less the fields ``stored`` lacked, each checked to be one the record gained since
    (at its default)."""
    for key in saved.keys() - stored.keys():
        assert key in GAINED[where] and saved[key] == GAINED[where][key], (where, key, saved[key])
    return {k: v for k, v in saved.items() if k in stored}


@pytest.mark.parametrize("archive", ARCHIVES, ids=lambda p: p.parent.name)
def test_every_archived_trajectory_reads_back_all_it_stored(archive):
    """Old evaluations lack the fields the record gained since: they read as their defaults, and
    nothing stored is dropped or changed; saved again, the trajectory reads back as it was."""
    with lzma.open(archive, "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    assert lines
    for line in lines:
        stored = json.loads(line)
        traj = Trajectory.from_dict(stored)
        saved = traj.to_dict()
        assert json.dumps(saved["baseline"]) == json.dumps(stored["baseline"])
        for old, new, step in zip(stored["steps"], saved["steps"], traj.steps):
            if old["evaluation"] is None:
                assert step.evaluation is None and json.dumps(new) == json.dumps(old)
                continue
            assert isinstance(step.evaluation, EvalResult)
            evaluation = _added(new["evaluation"], old["evaluation"], "evaluation")
            if old["evaluation"]["timing"] is not None:
                evaluation["timing"] = _added(evaluation["timing"], old["evaluation"]["timing"], "timing")
                if old["evaluation"]["timing"].get("clock_check") is not None:
                    evaluation["timing"]["clock_check"] = _added(evaluation["timing"]["clock_check"],
                                                                 old["evaluation"]["timing"]["clock_check"], "clock_check")
            assert json.dumps({**new, "evaluation": evaluation}) == json.dumps(old)
        if stored["analysis"] is not None:
            assert isinstance(traj.analysis, Analysis)
            saved = {**saved, "analysis": _added(saved["analysis"], stored["analysis"], "analysis")}
        assert json.dumps({**saved, "steps": []}) == json.dumps({**stored, "steps": []})
        again = traj.to_dict()
        assert Trajectory.from_dict(json.loads(json.dumps(again))).to_dict() == again
