"""Built-in and saved hardware profiles, and which one a rank's environment selects."""

import json

import pytest

from kloom.roofline import HardwareProfile, builtin_profiles, detect_profile, load_profile
from kloom.roofline.profiles import profile_dir, profile_name_for_gpu, save_profile


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KLOOM_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_builtins_cover_h100_h200_and_the_cpu_from_the_measured_figures():
    profiles = builtin_profiles()
    assert {"h100", "h200", "cpu"} <= set(profiles)
    h200 = profiles["h200"]
    assert h200.matmul_tflops["bf16"] == 780.0 and h200.hbm_gbps == 4200.0 and h200.link_gbps == 395.0
    assert set(h200.collective_busbw_gbps) == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}


def test_a_saved_profile_takes_the_place_of_the_builtin(cache):
    mine = HardwareProfile(name="h200", description="calibrated", matmul_tflops={"bf16": 700.0}, hbm_gbps=4000.0, link_gbps=380.0, source="calibrated")
    path = save_profile(mine)
    assert path == profile_dir() / "h200.json" and path.parent == cache / "profiles"
    assert load_profile("h200").link_gbps == 380.0
    assert load_profile(str(path)).source == "calibrated"
    assert load_profile("h100").source == "builtin"
    assert json.loads(path.read_text())["name"] == "h200"
    with pytest.raises(KeyError, match="unknown hardware profile"):
        load_profile("tpu")


@pytest.mark.parametrize(
    "gpu,name",
    [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb")],
)
def test_profile_names_come_from_the_gpu_name(gpu, name):
    assert profile_name_for_gpu(gpu) == name


def test_detect_profile_finds_calibrated_profiles_of_other_gpus(cache):
    assert detect_profile({}) == "cpu"
    assert detect_profile({"gpu": "NVIDIA H200"}) == "h200"
    assert detect_profile({"gpu": "NVIDIA A100-SXM4-80GB"}) == "h100"  # nothing better known yet
    save_profile(HardwareProfile(name="nvidia-a100-sxm4-80gb", description="", matmul_tflops={"bf16": 300.0}, hbm_gbps=1800.0, link_gbps=250.0))
    assert detect_profile({"gpu": "NVIDIA A100-SXM4-80GB"}) == "nvidia-a100-sxm4-80gb"
