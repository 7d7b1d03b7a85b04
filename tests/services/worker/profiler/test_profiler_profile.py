"""``profile()`` end to end on the CPU (gloo), its fallbacks, and its settings."""

import json
import os
import tempfile
import time
from pathlib import Path

import pytest
import torch

from kloom.processes import descendants
from services.worker.profiler import Profile, ProfileSettings, profile
from services.worker.profiler.launch import LaunchSpec
from services.worker.profiler.profiling import nsight_compute

WORKLOADS = Path(__file__).parent / "workloads"
CANDIDATE = (WORKLOADS / "allgather_matmul_candidate.py").read_text()


def _settings(**kw) -> ProfileSettings:
    return ProfileSettings.for_device("cpu", seed=11, iters=3, warmup_iters=1, **kw)


@pytest.fixture(scope="module")
def reference_profile() -> Profile:
    return profile(WORKLOADS / "overlapped_allreduce.py", None, world_size=2, device="cpu", settings=_settings())


def test_cpu_profile_is_the_operator_summary_with_communication_shares(reference_profile):
    p = reference_profile
    assert (p.status, p.tool) == ("ok", "torch_profiler")
    assert "CPU" in p.reason
    assert p.ranks_timed == [0, 1] and p.ranks_profiled == []
    assert [t.rank for t in p.timelines] == [0, 1] and all(t.iterations == 3 for t in p.timelines)
    mm = next(k for k in p.kernels if k.name == "aten::mm")
    assert mm.category == "gemm" and mm.calls == 2 * 3 * 16 and not mm.communication
    assert any(k.communication and k.name.startswith("gloo:") for k in p.kernels)
    assert 0 < p.communication_share <= 1
    assert 0 <= p.exposed_communication_share <= p.communication_share
    assert p.communication_share == max(t.communication_share for t in p.timelines)
    assert abs(sum(k.share for k in p.kernels) - 1) < 0.05  # the top ten hold nearly all the time
    assert "aten::mm" in p.summary and "communication" in p.summary and "exposed" in p.summary
    assert p.seconds >= p.phase_seconds["timeline"] > 0


def test_profile_round_trips_through_json(reference_profile):
    again = Profile.from_dict(json.loads(json.dumps(reference_profile.to_dict())))
    assert again == reference_profile


def test_a_candidate_is_profiled_in_place_of_the_reference():
    p = profile(WORKLOADS / "allgather_matmul.py", CANDIDATE, world_size=2, device="cpu", settings=_settings())
    assert p.status == "ok" and len(p.candidate_sha256) == 64
    names = {k.name for k in p.kernels}
    assert "aten::cat" in names  # only the candidate concatenates
    assert p.exposed_communication_share > 0.5 * p.communication_share  # nothing hides its all-gather


def test_a_candidate_the_static_checker_rejects_is_never_run():
    source = CANDIDATE.replace("import torch\n", "import subprocess\nimport torch\n", 1)
    started = time.monotonic()
    p = profile(WORKLOADS / "allgather_matmul.py", source, world_size=2, device="cpu", settings=_settings())
    assert (p.status, p.tool) == ("failed", "none")
    assert "static checker" in p.reason and "subprocess" in p.reason
    assert p.phase_seconds == {} and time.monotonic() - started < 10


def test_a_candidate_that_raises_reports_the_rank_and_the_error():
    source = CANDIDATE.replace("parts = [", "raise ValueError('no kernel today')\n        parts = [")
    p = profile(WORKLOADS / "allgather_matmul.py", source, world_size=2, device="cpu", settings=_settings())
    assert p.status == "failed"
    assert "no kernel today" in p.reason and "rank" in p.reason


def test_a_hang_ends_in_a_timeout_status_and_leaves_nothing_behind():
    before = set(os.listdir(tempfile.gettempdir()))
    processes_before = set(descendants(os.getpid()))
    started = time.monotonic()
    p = profile(WORKLOADS / "hanging_rank.py", None, world_size=2, device="cpu", settings=_settings(timeout_s=8))
    assert p.status == "timeout" and "8 s" in p.reason
    assert time.monotonic() - started < 30
    leftovers = {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith(("kloom-profile-", "kloom-launch-"))}
    assert leftovers == set()
    # Only processes this profile started count: other tests of the session keep their own.
    assert not [pid for pid in descendants(os.getpid()) if pid not in processes_before and Path(f"/proc/{pid}/cmdline").exists()]


def test_missing_ncu_is_reported_and_the_timeline_kept(tmp_path):
    spec = LaunchSpec(workload=str(WORKLOADS / "allgather_matmul.py"), world_size=2, device="cpu", out_dir=str(tmp_path / "t"))
    result = Profile(tool="none", status="failed", reason="", workload=spec.workload, world_size=2, device="cuda")
    settings = ProfileSettings.for_device("cuda", ncu_path="/nonexistent/ncu")

    def no_launch(*args, **kwargs):
        raise AssertionError(f"launched {args}")

    nsight_compute(spec, settings, no_launch, tmp_path, result)
    assert (result.status, result.tool) == ("unavailable", "torch_profiler")
    assert result.reason.startswith("ncu not found") and "/nonexistent/ncu" in result.reason
    assert not (tmp_path / "ncu").exists()  # nothing was launched


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_gpus_is_unavailable_before_anything_runs():
    p = profile(WORKLOADS / "allgather_matmul.py", None, world_size=2, device="cuda")
    assert (p.status, p.tool) == ("unavailable", "none") and "CUDA" in p.reason


def test_bad_inputs_fail_with_a_reason():
    assert "world size 3" in profile(WORKLOADS / "allgather_matmul.py", None, world_size=3, device="cpu").reason
    assert "ModelNew" in profile(WORKLOADS / "allgather_matmul.py", "x = 1\n", world_size=2, device="cpu").reason
    bad_ranks = profile(WORKLOADS / "allgather_matmul.py", None, world_size=2, device="cpu", settings=_settings(ranks="5"))
    assert bad_ranks.status == "failed" and "world size 2" in bad_ranks.reason


def test_which_candidates_get_a_profile():
    every, best = ProfileSettings(candidates="every_correct"), ProfileSettings(candidates="new_best")
    assert every.should_profile(correct=True, new_best=False)
    assert not best.should_profile(correct=True, new_best=False)
    assert best.should_profile(correct=True, new_best=True)
    assert not every.should_profile(correct=False, new_best=True)


def test_ranks_and_environment_overrides(monkeypatch):
    assert ProfileSettings(ranks="all").ncu_ranks(4) == [0, 1, 2, 3]
    assert ProfileSettings(ranks="2, 0").ncu_ranks(4) == [0, 2]
    monkeypatch.setenv("KLOOM_PROFILE_RANKS", "all")
    monkeypatch.setenv("KLOOM_PROFILE_TIMEOUT_S", "42.5")
    monkeypatch.setenv("KLOOM_PROFILE_SECTIONS", "SpeedOfLight,Occupancy")
    monkeypatch.setenv("KLOOM_PROFILE_CANDIDATES", "every_correct")
    monkeypatch.setenv("KLOOM_PROFILE_NVML", "off")
    s = ProfileSettings.from_env("cuda")
    assert (s.ranks, s.timeout_s, s.sections, s.candidates, s.nvml, s.shapes) == ("all", 42.5, ["SpeedOfLight", "Occupancy"], "every_correct", False, "gpu")
