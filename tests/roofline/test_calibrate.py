"""Calibration measures this machine for real: on the CPU with 2 gloo ranks (quick sizes), and on
CUDA GPUs where there are some."""

import json
from datetime import datetime, timedelta, timezone

import pytest
import torch
from typer.testing import CliRunner

from kloom.cli import app
from kloom.roofline import HardwareProfile, builtin_profiles, load_profile
from kloom.roofline.calibrate import calibrate, choose_link, load_or_calibrate, profile_age_s
from kloom.roofline.model import COLLECTIVES
from kloom.roofline.profiles import profile_dir, save_profile


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KLOOM_CACHE_DIR", str(tmp_path))
    return tmp_path


def _assert_measured_cpu(profile: HardwareProfile, world_size: int) -> None:
    assert profile.source == "calibrated" and profile.name == "cpu" and profile.world_size == world_size
    assert set(profile.matmul_tflops) >= {"bf16", "fp16", "fp32"}
    assert all(rate > 0 for rate in profile.matmul_tflops.values())
    assert profile.hbm_gbps > 0
    assert set(profile.collective_busbw_gbps) == set(COLLECTIVES)
    assert all(bw > 0 for bw in profile.collective_busbw_gbps.values())
    assert profile.link_gbps == max(profile.collective_busbw_gbps.values())
    assert profile.link_basis.endswith(f"busbw over {world_size} ranks")
    assert profile.collective_latency_us["all_reduce"] > 0
    assert profile_age_s(profile) < 600


def test_cpu_calibration_is_cached_and_redone_when_stale(cache):
    fresh = load_or_calibrate("cpu", world_size=2, quick=True)
    _assert_measured_cpu(fresh, 2)
    saved = profile_dir() / "cpu.json"
    assert HardwareProfile.from_dict(json.loads(saved.read_text())) == fresh
    assert load_profile("cpu") == fresh  # the evaluator's roofline now uses the measured ceilings

    assert load_or_calibrate("cpu", world_size=2, max_age_s=3600, quick=True) == fresh

    stale = HardwareProfile.from_dict(fresh.to_dict())
    stale.measured_at = (datetime.now(timezone.utc) - timedelta(days=30)).isoformat(timespec="seconds")
    stale.link_gbps = -1.0  # a value no measurement gives, so that reuse would show
    save_profile(stale)
    again = load_or_calibrate("cpu", world_size=2, max_age_s=86400, quick=True)
    assert again.link_gbps > 0 and profile_age_s(again) < 600


def test_calibrate_command_prints_and_writes_the_profile(cache):
    out = cache / "mine.json"
    result = CliRunner().invoke(app, ["calibrate", "--device", "cpu", "--world-size", "2", "--quick", "--out", str(out), "--name", "bench-host"])
    assert result.exit_code == 0, result.output
    assert "link (used by the floor)" in result.output and "all_to_all busbw (2 ranks)" in result.output
    profile = HardwareProfile.from_dict(json.loads(out.read_text()))
    assert profile.name == "bench-host" and profile.source == "calibrated"
    assert not (profile_dir() / "cpu.json").exists()


def test_one_rank_on_the_cpu_keeps_the_builtin_link_ceiling(cache):
    profile = calibrate("cpu", world_size=1, quick=True)
    assert profile.collective_busbw_gbps == {}
    assert profile.link_gbps == builtin_profiles()["cpu"].link_gbps
    assert profile.link_basis.startswith("built-in cpu profile")


def test_link_ceiling_is_the_best_per_gpu_one_way_rate():
    assert choose_link(395.0, {"all_reduce": 333.0, "all_to_all": 297.0}, 4, None) == (395.0, "peer copy GPU0->GPU1")
    assert choose_link(120.0, {"all_reduce": 333.0}, 4, None) == (333.0, "all_reduce busbw over 4 ranks")
    assert choose_link(0.0, {}, 1, None) == (0.0, "none measured")


def test_unknown_devices_and_too_many_ranks_are_refused():
    from kloom.roofline.calibrate import CalibrationError

    with pytest.raises(CalibrationError, match="cpu or cuda"):
        calibrate("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(CalibrationError, match="no CUDA device"):
            calibrate("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_calibration_measures_plausible_ceilings(cache):
    gpus = torch.cuda.device_count()
    profile = calibrate("cuda", world_size=gpus, quick=True)
    assert profile.matmul_tflops["bf16"] > 50 and profile.matmul_tflops["fp32"] > 5
    assert profile.matmul_tflops["bf16"] > profile.matmul_tflops["fp32"]
    assert profile.hbm_gbps > 500
    if gpus >= 2:
        assert profile.peer_copy_gbps > 10
        assert set(profile.collective_busbw_gbps) == set(COLLECTIVES)
        assert profile.link_gbps == max([profile.peer_copy_gbps, *profile.collective_busbw_gbps.values()])
